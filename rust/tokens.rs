//! Heuristic token estimate of a text, close to cl100k_base (or o200k_base) without a
//! vocabulary.
//!
//! The text is split into maximal runs of one character class, and each run costs a whole
//! number of tokens (integer arithmetic only, `ceil(n / k)` is `(n + k - 1) / k`):
//!
//! | class | characters                                            | tokens of a run          |
//! |-------|-------------------------------------------------------|--------------------------|
//! | L     | ASCII letters                                         | `ceil(n / 9)`            |
//! | D     | ASCII digits                                          | `ceil(n / 3)`            |
//! | W     | ASCII whitespace (space, `\t \n \r \x0b \x0c`)        | 0 for a lone `' '`, else 1; +1 if it ends with `' '` before a digit |
//! | P     | any other ASCII code point                            | `ceil(n / 3)`            |
//! | C     | CJK: U+2E80-9FFF, AC00-D7AF, F900-FAFF, FF00-FFEF, 20000-2FFFF | `ceil(21n / 20)` (o200k: `ceil(7n / 10)`) |
//! | O     | any other code point                                  | `ceil(utf8_bytes / 2)`   |
//!
//! A lowercase letter followed by an uppercase one ends an L run (`getOrder` is two runs).
//!
//! Calibrated against the exact counts of `rust/bpe.rs` on the seeded corpora of
//! `tests/token_corpus.py` (English support prose, JSON tool results with English or Chinese
//! values, code, Chinese support dialogue; 0-100% of the texts Chinese; tool-heavy
//! conversations whose results are JSON with timestamps, uuids, order ids, hex, opaque ids,
//! numbers and Chinese values) and of `tests/test_tokens_parity.py`: every class but C costs
//! the same in both encodings; heuristic / exact is within 0.95-1.06 on every corpus and kind
//! of tool result and on the Chinese-bearing texts, for either encoding (`tests/test_tokens_accuracy.py` keeps it within
//! ±10%).
//! - L = 9: cl100k keeps nearly every English word whole (with its leading space, hence the
//!   free lone space); only long, rare words split. o200k splits letters where a lowercase
//!   letter meets an uppercase one, and opaque ids (`pi_3MtwBwLkdIwHu7ix`) cost far more than
//!   words: the split counts both better.
//! - D = 3: cl100k splits digit runs into groups of at most three. A digit never takes the
//!   space before it (`": 42` is `":`, ` `, `42`), hence the extra token of the whitespace.
//! - P = 3: JSON punctuation merges (`{"`, `":`, `",`, `"}`).
//! - C = 21/20 (cl100k) or 7/10 (o200k): cl100k has a token for 549 common ideographs and
//!   splits the others into two or three; o200k has tokens for common words of two or more
//!   ideographs.
//! - O = 2 bytes: Greek, Arabic, Devanagari and emoji cost about one token per 2 UTF-8 bytes.
//!
//! `python/agentctx_fast/core/_reference/tokens.py` is the pure-Python twin and must give the same
//! result on every string.

const LETTER_CHARS: u64 = 9;
const DIGIT_CHARS: u64 = 3;
const PUNCT_CHARS: u64 = 3;

/// What a run of CJK characters costs: `ceil(n * num / den)`, per encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heuristic {
    cjk_num: u64,
    cjk_den: u64,
}

/// The heuristic of cl100k_base (the default).
pub const CL100K: Heuristic = Heuristic {
    cjk_num: 21,
    cjk_den: 20,
};
/// The heuristic of o200k_base.
pub const O200K: Heuristic = Heuristic {
    cjk_num: 7,
    cjk_den: 10,
};
const OTHER_BYTES: u64 = 2;

const L: u8 = 0;
const D: u8 = 1;
const W: u8 = 2;
const P: u8 = 3;
/// Any byte >= 0x80: the start or continuation of a multi-byte character.
const NON_ASCII: u8 = 4;

/// Class of every byte; bytes >= 0x80 are `NON_ASCII`.
static CLASS: [u8; 256] = {
    let mut table = [NON_ASCII; 256];
    let mut b = 0;
    while b < 128 {
        table[b] = match b as u8 {
            b'A'..=b'Z' | b'a'..=b'z' => L,
            b'0'..=b'9' => D,
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => W,
            _ => P,
        };
        b += 1;
    }
    table
};

#[inline]
fn ceil_div(n: u64, k: u64) -> u64 {
    n.div_ceil(k)
}

#[inline]
fn is_cjk(cp: u32) -> bool {
    matches!(cp, 0x2E80..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF | 0x20000..=0x2FFFF)
}

/// Decodes the character starting at `bytes[i]` (a byte >= 0x80): its code point and length.
///
/// Lenient on purpose: it also decodes the 3-byte form of a lone surrogate (what Python's
/// `surrogatepass` produces), and never panics on malformed or truncated input.
#[inline]
fn decode(bytes: &[u8], i: usize) -> (u32, usize) {
    let lead = bytes[i];
    let (len, init) = match lead {
        0xC0..=0xDF => (2, u32::from(lead & 0x1F)),
        0xE0..=0xEF => (3, u32::from(lead & 0x0F)),
        0xF0..=0xF7 => (4, u32::from(lead & 0x07)),
        _ => return (0xFFFD, 1),
    };
    let Some(tail) = bytes.get(i + 1..i + len) else {
        return (0xFFFD, 1);
    };
    let cp = tail
        .iter()
        .fold(init, |cp, &b| (cp << 6) | u32::from(b & 0x3F));
    (cp, len)
}

/// Tokens every message costs besides its texts (role, separators).
pub const MESSAGE_OVERHEAD: u64 = 4;
/// Tokens every tool call costs besides its name and arguments.
pub const TOOL_CALL_OVERHEAD: u64 = 3;
/// Tokens an image, audio or file part of a user message is estimated at.
pub const MEDIA_PART_TOKENS: u64 = 85;

/// Heuristic tokens of the synthetic result that closes a call left without one.
pub fn missing_result_tokens() -> u64 {
    MESSAGE_OVERHEAD + count_text(crate::window::MISSING_RESULT_TEXT)
}

/// Estimated cl100k_base tokens of `text`; 0 for the empty string.
pub fn count_text(text: &str) -> u64 {
    count_utf8_bytes(text.as_bytes())
}

/// [`count_utf8_bytes_with`] the cl100k_base heuristic.
pub fn count_utf8_bytes(bytes: &[u8]) -> u64 {
    count_utf8_bytes_with(&CL100K, bytes)
}

/// [`count_text`] on UTF-8 bytes, also accepting lone surrogates in their 3-byte form (WTF-8,
/// as Python's `str.encode("utf-8", "surrogatepass")` makes them): each is one `O` character
/// of 3 bytes. Malformed bytes never panic; each counts as a 1-byte `O` character.
///
/// ASCII is counted 64 bytes at a time from class bit masks (see [`block_tokens`]); runs of
/// non-ASCII characters, and ASCII runs a block cannot hold whole, go through [`run_tokens`].
pub fn count_utf8_bytes_with(heuristic: &Heuristic, bytes: &[u8]) -> u64 {
    let mut tokens = 0;
    let mut i = 0;
    // Below this index blocks do not pay (ASCII and non-ASCII alternate within a few bytes).
    let mut scalar_until = 0;
    while i < bytes.len() {
        if i >= scalar_until {
            if let Some(block) = bytes
                .get(i..i + BLOCK)
                .and_then(|b| <&[u8; BLOCK]>::try_from(b).ok())
            {
                let masks = Masks::of(block);
                let end = masks.whole_runs();
                if end >= MIN_BLOCK_RUNS {
                    tokens += masks.block_tokens(end);
                    i += end;
                    continue;
                }
                scalar_until = i + BLOCK;
            }
        }
        let (run, next) = run_tokens(heuristic, bytes, i);
        tokens += run;
        i = next;
    }
    tokens
}

/// Bytes counted together from bit masks.
const BLOCK: usize = 64;
/// A block whose whole runs end before this many bytes is left to the run-by-run count.
const MIN_BLOCK_RUNS: usize = 16;

/// The run starting at `bytes[start]`: its tokens and the index after it.
fn run_tokens(heuristic: &Heuristic, bytes: &[u8], start: usize) -> (u64, usize) {
    let n = bytes.len();
    let Some(&first) = bytes.get(start) else {
        return (0, n);
    };
    let class = CLASS[usize::from(first)];
    let mut i = start;
    if class != NON_ASCII {
        i += 1;
        while i < n && CLASS[usize::from(bytes[i])] == class {
            i += 1;
        }
        let run = (i - start) as u64;
        let tokens = match class {
            L => letter_tokens(bytes.get(start..i).unwrap_or_default()),
            D => ceil_div(run, DIGIT_CHARS),
            W => {
                let ends_in_space = bytes.get(i - 1) == Some(&b' ');
                let before_digit = bytes.get(i).is_some_and(u8::is_ascii_digit);
                u64::from(!(run == 1 && first == b' ')) + u64::from(ends_in_space && before_digit)
            }
            _ => ceil_div(run, PUNCT_CHARS),
        };
        return (tokens, i);
    }
    // A run of non-ASCII characters, all CJK or all other.
    let (cp, len) = decode(bytes, i);
    let cjk = is_cjk(cp);
    let mut chars = 1;
    i += len;
    while i < n && bytes[i] >= 0x80 {
        let (cp, len) = decode(bytes, i);
        if is_cjk(cp) != cjk {
            break;
        }
        chars += 1;
        i += len;
    }
    let tokens = if cjk {
        ceil_div(chars * heuristic.cjk_num, heuristic.cjk_den)
    } else {
        ceil_div((i - start) as u64, OTHER_BYTES)
    };
    (tokens, i)
}

/// Tokens of a run of ASCII letters: `ceil(n / 9)` of each part, a part ending where a
/// lowercase letter is followed by an uppercase one.
fn letter_tokens(run: &[u8]) -> u64 {
    let mut tokens = 0;
    let mut part = 0;
    let mut after_lower = false;
    for &b in run {
        let upper = b.is_ascii_uppercase();
        if upper && after_lower {
            tokens += ceil_div(part, LETTER_CHARS);
            part = 0;
        }
        part += 1;
        after_lower = !upper;
    }
    tokens + ceil_div(part, LETTER_CHARS)
}

/// The classes of a 64-byte block as bit masks: bit `j` is about byte `j`. Punctuation (`P`)
/// is what is left of ASCII.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Masks {
    letters: u64,
    upper: u64,
    digits: u64,
    white: u64,
    space: u64,
    non_ascii: u64,
}

impl Masks {
    /// SSE2 on x86_64: measured against `of_bytes` on every target (heuristic `count_text`,
    /// cl100k, one build of each, medians): 100 KB JSON tool result 60 µs vs 492 µs, 4 KB 2.5 µs
    /// vs 20 µs, 20 KB English 9.6 µs vs 96 µs, 20 KB Chinese 33 µs vs 69 µs; a window over
    /// 1,000 freshly decoded tool-heavy messages 180 µs vs 354 µs. A safe 8-bytes-per-word
    /// (SWAR) loop still cost 2.3x on ASCII text and 1.17x on that window.
    #[cfg(target_arch = "x86_64")]
    fn of(block: &[u8; BLOCK]) -> Masks {
        // SAFETY: SSE2 is part of the x86_64 baseline, enabled on every x86_64 target.
        unsafe { sse2::masks(block) }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn of(block: &[u8; BLOCK]) -> Masks {
        Masks::of_bytes(block)
    }

    /// The portable definition (and the check of the SIMD one).
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn of_bytes(block: &[u8; BLOCK]) -> Masks {
        let mut masks = Masks::default();
        for (j, &b) in block.iter().enumerate() {
            let class = CLASS[usize::from(b)];
            masks.letters |= u64::from(class == L) << j;
            masks.upper |= u64::from(b.is_ascii_uppercase()) << j;
            masks.digits |= u64::from(class == D) << j;
            masks.white |= u64::from(class == W) << j;
            masks.space |= u64::from(b == b' ') << j;
            masks.non_ascii |= u64::from(class == NON_ASCII) << j;
        }
        masks
    }

    /// How many leading bytes of the block form whole runs: up to the first non-ASCII byte,
    /// or else up to the start of the last run (which may go on past the block). The block
    /// always starts at the start of a run.
    fn whole_runs(&self) -> usize {
        let ascii = self.non_ascii.trailing_zeros() as usize;
        if ascii < BLOCK {
            return ascii;
        }
        let changes = (self.letters ^ (self.letters << 1))
            | (self.digits ^ (self.digits << 1))
            | (self.white ^ (self.white << 1));
        let changes = changes & !1;
        if changes == 0 {
            return 0;
        }
        (u64::BITS - 1 - changes.leading_zeros()) as usize
    }

    /// Tokens of the runs in the first `end` bytes (1..=63, all ASCII, ending at a run end).
    fn block_tokens(&self, end: usize) -> u64 {
        let valid = (1u64 << end) - 1;
        let letters = self.letters & valid;
        let digits = self.digits & valid;
        let white = self.white & valid;
        let punct = !(self.letters | self.digits | self.white | self.non_ascii) & valid;
        // A letter part starts a letter run, or is an uppercase letter after a lowercase one.
        let lower = letters & !self.upper;
        let letter_starts = starts(letters) | (self.upper & (lower << 1) & valid);
        // A whitespace run costs 1, except a lone space; one more when it ends with a space
        // and a digit follows (the byte after the last whole run is still in the block).
        let white_starts = starts(white);
        let white_ends = white & !(white >> 1);
        let lone_spaces = white_starts & white_ends & self.space;
        let before_digits = white_ends & self.space & (self.digits >> 1);
        runs_of(letters, letter_starts, LETTER_CHARS)
            + runs_of(digits, starts(digits), DIGIT_CHARS)
            + runs_of(punct, starts(punct), PUNCT_CHARS)
            + u64::from(white_starts.count_ones() - lone_spaces.count_ones())
            + u64::from(before_digits.count_ones())
    }
}

/// The first bit of every run of set bits.
fn starts(members: u64) -> u64 {
    members & !(members << 1)
}

/// `sum(ceil(n / k))` over the parts of `members`, each part starting at a bit of `starts` and
/// going on while the bits are set: the bits at offsets 0, k, 2k, … of every part, found by
/// walking each part's start k bits at a time while it stays inside.
fn runs_of(members: u64, starts: u64, k: u64) -> u64 {
    let inside = members & !starts;
    let mut at = starts;
    let mut tokens = u64::from(at.count_ones());
    loop {
        for _ in 0..k {
            at = (at << 1) & inside;
        }
        if at == 0 {
            return tokens;
        }
        tokens += u64::from(at.count_ones());
    }
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::{Masks, BLOCK};
    use std::arch::x86_64::{
        __m128i, _mm_add_epi8, _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8, _mm_set_epi64x,
    };

    /// Bytes in `lo..=hi` (both below 0x80): a signed compare after moving `lo` to -128.
    #[target_feature(enable = "sse2")]
    fn in_range(v: __m128i, lo: u8, hi: u8) -> __m128i {
        let moved = _mm_add_epi8(v, _mm_set1_epi8(0x80u8.wrapping_sub(lo) as i8));
        _mm_cmplt_epi8(moved, _mm_set1_epi8(0x80u8.wrapping_add(hi - lo + 1) as i8))
    }

    #[target_feature(enable = "sse2")]
    pub(super) fn masks(block: &[u8; BLOCK]) -> Masks {
        let mut masks = Masks::default();
        let bits = |v: __m128i| u64::from(_mm_movemask_epi8(v) as u16);
        for (q, chunk) in block.chunks_exact(16).enumerate() {
            let mut lanes = [0u64; 2];
            for (lane, bytes) in lanes.iter_mut().zip(chunk.chunks_exact(8)) {
                *lane = u64::from_le_bytes(bytes.try_into().unwrap_or_default());
            }
            let v = _mm_set_epi64x(lanes[1] as i64, lanes[0] as i64);
            let space = _mm_cmpeq_epi8(v, _mm_set1_epi8(b' ' as i8));
            let shift = 16 * q;
            masks.letters |=
                bits(in_range(_mm_or_si128(v, _mm_set1_epi8(0x20)), b'a', b'z')) << shift;
            masks.upper |= bits(in_range(v, b'A', b'Z')) << shift;
            masks.digits |= bits(in_range(v, b'0', b'9')) << shift;
            masks.white |= bits(_mm_or_si128(space, in_range(v, 0x09, 0x0d))) << shift;
            masks.space |= bits(space) << shift;
            masks.non_ascii |= bits(v) << shift;
        }
        masks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_whitespace() {
        assert_eq!(count_text(""), 0);
        assert_eq!(count_text(" "), 0);
        assert_eq!(count_text("  "), 1);
        assert_eq!(count_text("\n"), 1);
        assert_eq!(count_text(" \t"), 1);
    }

    #[test]
    fn ascii_runs() {
        assert_eq!(count_text("a"), 1);
        assert_eq!(count_text("abcdefghi"), 1);
        assert_eq!(count_text("abcdefghij"), 2);
        assert_eq!(count_text("hello world"), 2);
        assert_eq!(count_text("123"), 1);
        assert_eq!(count_text("1234"), 2);
        assert_eq!(count_text("ORD-2024-001"), 6);
        // The space before a digit is a token of its own.
        assert_eq!(count_text(r#"{"a": 1}"#), 6);
        assert_eq!(count_text("a 1"), 3);
        assert_eq!(count_text("a  1"), 4);
        assert_eq!(count_text("a\n1"), 3);
        assert_eq!(count_text("a\n 1"), 4);
        assert_eq!(count_text("a 1 b"), 4);
        // Letters split where a lowercase letter meets an uppercase one.
        assert_eq!(count_text("getOrderStatus"), 3);
        assert_eq!(count_text("HTTPServer"), 2);
        assert_eq!(count_text("iPhone"), 2);
        assert_eq!(count_text("aBcDeF"), 4);
        assert_eq!(count_text("a\x00b\x7f"), 4);
    }

    #[test]
    fn non_ascii_runs() {
        assert_eq!(count_text("你"), 2);
        assert_eq!(count_text("你好"), 3);
        assert_eq!(count_text("你好，世界。"), 7);
        assert_eq!(count_text(&"你".repeat(20)), 21);
        assert_eq!(count_utf8_bytes_with(&O200K, "你好".as_bytes()), 2);
        assert_eq!(count_utf8_bytes_with(&O200K, "你好，世界。".as_bytes()), 5);
        assert_eq!(count_utf8_bytes_with(&O200K, "é你".as_bytes()), 1 + 1);
        assert_eq!(count_text("é"), 1);
        assert_eq!(count_text("café"), 2);
        assert_eq!(count_text("😀"), 2);
        assert_eq!(count_text("\u{2E7F}\u{2E80}"), 2 + 2);
        assert_eq!(count_text("\u{20000}\u{2FFFF}\u{30000}"), 3 + 2);
        assert_eq!(count_text("é你"), 1 + 2);
    }

    #[test]
    fn cjk_boundaries() {
        for (cp, cjk) in [
            (0x2E7F, false),
            (0x2E80, true),
            (0x9FFF, true),
            (0xA000, false),
            (0xAC00, true),
            (0xD7AF, true),
            (0xD7B0, false),
            (0xF900, true),
            (0xFAFF, true),
            (0xFB00, false),
            (0xFF00, true),
            (0xFFEF, true),
            (0xFFF0, false),
            (0x1FFFF, false),
            (0x20000, true),
            (0x2FFFF, true),
            (0x30000, false),
        ] {
            let c = char::from_u32(cp).unwrap();
            let expected = if cjk {
                2
            } else {
                ceil_div(c.len_utf8() as u64, OTHER_BYTES)
            };
            assert_eq!(count_text(&c.to_string()), expected, "U+{cp:X}");
        }
    }

    #[test]
    fn surrogates_and_malformed_bytes() {
        // "a" + lone surrogate U+D800 (surrogatepass) + "你": L, O (3 bytes), C.
        assert_eq!(count_utf8_bytes(b"a\xed\xa0\x80\xe4\xbd\xa0"), 1 + 2 + 2);
        assert_eq!(count_utf8_bytes(b"\xff\xfe"), 1);
        assert_eq!(count_utf8_bytes(b"\xe4\xbd"), 1);
        assert_eq!(count_utf8_bytes(b"\x80"), 1);
    }

    #[test]
    fn matches_char_by_char_definition() {
        let text = "Order ORD-2024-001 shipped,  see {\"id\": 42}\n\n订单已发货！ Ünïcödé 😀 한국어 \u{20001}x getOrderID 7 \n 8";
        assert_eq!(count_text(text), naive(&CL100K, text));
        let o200k = count_utf8_bytes_with(&O200K, text.as_bytes());
        assert_eq!(o200k, naive(&O200K, text));
    }

    #[test]
    fn long_runs_and_chunk_edges() {
        for n in (0..200).chain([4095, 65536]) {
            for unit in [
                "a", "aB", "B", "7", " ", " 7", "\n", "-", "{\"", "ab1 ", "你", "é",
            ] {
                let text = unit.repeat(n);
                assert_eq!(count_text(&text), naive(&CL100K, &text), "{unit:?} x {n}");
                let mixed = format!("x{text}é{text}9");
                assert_eq!(
                    count_text(&mixed),
                    naive(&CL100K, &mixed),
                    "{unit:?} x {n} mixed"
                );
            }
        }
    }

    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn simd_masks_match_the_table() {
        let mut state = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut block = [0u8; BLOCK];
            for b in block.iter_mut() {
                *b = xorshift(&mut state) as u8;
            }
            assert_eq!(Masks::of(&block), Masks::of_bytes(&block), "{block:?}");
        }
    }

    #[test]
    fn random_mixes_match_char_by_char_definition() {
        let pieces = [
            "a",
            "word",
            "abcdefghijklmnopqrstuvwxyz",
            "getOrderStatus",
            "ABCdefGHI",
            "aZ",
            "7",
            "2024",
            "1234567",
            " ",
            "  ",
            " 4",
            "\n 2",
            "\n",
            "\t \r",
            "-",
            "{\"",
            "\":",
            "!!!!!!!",
            "你",
            "订单已发货",
            "é",
            "😀",
            "\u{20001}",
            "\x00",
            "\x7f",
            "한국어",
            "Ünï",
        ];
        let mut state = 0x2545_f491_4f6c_dd1d;
        for case in 0..3_000 {
            let mut text = String::new();
            let len = xorshift(&mut state) % 400;
            while (text.len() as u64) < len {
                let piece = pieces[(xorshift(&mut state) % pieces.len() as u64) as usize];
                text.push_str(&piece.repeat(1 + (xorshift(&mut state) % 12) as usize));
            }
            assert_eq!(
                count_text(&text),
                naive(&CL100K, &text),
                "case {case}: {text:?}"
            );
            let o200k = count_utf8_bytes_with(&O200K, text.as_bytes());
            assert_eq!(o200k, naive(&O200K, &text), "case {case}: {text:?}");
        }
    }

    /// The definition, straight: classify every char, split into runs, sum.
    fn naive(heuristic: &Heuristic, text: &str) -> u64 {
        let class = |c: char| -> u8 {
            if c.is_ascii() {
                CLASS[c as usize]
            } else if is_cjk(c as u32) {
                5
            } else {
                6
            }
        };
        let chars: Vec<char> = text.chars().collect();
        let mut tokens = 0;
        let mut i = 0;
        while i < chars.len() {
            let k = class(chars[i]);
            let mut j = i + 1;
            // A lowercase letter followed by an uppercase one ends a letter run.
            let split =
                |j: usize| chars[j].is_ascii_uppercase() && chars[j - 1].is_ascii_lowercase();
            while j < chars.len() && class(chars[j]) == k && !(k == L && split(j)) {
                j += 1;
            }
            let run = &chars[i..j];
            let n = run.len() as u64;
            let before_digit = chars.get(j).is_some_and(char::is_ascii_digit);
            tokens += match k {
                L => ceil_div(n, LETTER_CHARS),
                D => ceil_div(n, DIGIT_CHARS),
                W => u64::from(run != [' ']) + u64::from(run.last() == Some(&' ') && before_digit),
                P => ceil_div(n, PUNCT_CHARS),
                5 => ceil_div(n * heuristic.cjk_num, heuristic.cjk_den),
                _ => ceil_div(run.iter().map(|c| c.len_utf8() as u64).sum(), OTHER_BYTES),
            };
            i = j;
        }
        tokens
    }
}
