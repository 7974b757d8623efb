//! Exact token counts of OpenAI's `cl100k_base` and `o200k_base` encodings (SPEC §7), equal to
//! `len(tiktoken.get_encoding(name).encode_ordinary(text))` for every text.
//!
//! The vocabularies are built into the library (`rust/vocab/*.bin`, written by
//! `scripts/make_vocab.py`: every token in rank order, one length byte then its bytes), so
//! nothing is downloaded or read at run time. The first use of an encoding indexes its tokens
//! and compiles its split pattern, once per process.
//!
//! Counting is tiktoken's algorithm: the text is split by the encoding's pattern; a piece that
//! is a token costs 1, any other is merged byte pair by byte pair, always the pair of lowest
//! rank first (the leftmost of equal ranks), and costs the parts left. Long pieces are merged
//! with a heap instead of tiktoken's linear scans, which makes the same merges in the same order.
//!
//! The patterns are tiktoken's, for a regex engine without look-around or possessive
//! quantifiers: possessive quantifiers there never give back a character the next item could
//! take, so plain ones match the same; `\s+(?!\S)` becomes `\s+\s` with its last character
//! dropped (after `\s+$` has taken a run that ends the text), as the `bpe-openai` crate does.

use regex_automata::meta::{Cache, Regex};
use regex_automata::{Anchored, Input};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;

/// The encodings built in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    Cl100kBase,
    O200kBase,
}

impl Encoding {
    pub const ALL: [Encoding; 2] = [Encoding::O200kBase, Encoding::Cl100kBase];

    /// The encoding called `name` (`"o200k_base"` or `"cl100k_base"`).
    pub fn from_name(name: &str) -> Option<Encoding> {
        Encoding::ALL.into_iter().find(|e| e.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Encoding::Cl100kBase => "cl100k_base",
            Encoding::O200kBase => "o200k_base",
        }
    }

    /// The tokens in rank order (each a length byte then its bytes) and their hash table.
    fn vocabulary(self) -> (&'static [u8], &'static [u8]) {
        match self {
            Encoding::Cl100kBase => (
                include_bytes!("vocab/cl100k_base.bin"),
                include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_base.slots")),
            ),
            Encoding::O200kBase => (
                include_bytes!("vocab/o200k_base.bin"),
                include_bytes!(concat!(env!("OUT_DIR"), "/o200k_base.slots")),
            ),
        }
    }

    /// The split patterns, in order of preference, and whether the last character of a match
    /// is a look-ahead to drop.
    fn patterns(self) -> [(&'static str, bool); 3] {
        match self {
            Encoding::Cl100kBase => [
                (
                    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+$|\s*[\r\n]",
                    false,
                ),
                (r"\s+\s", true),
                (r"\s", false),
            ],
            Encoding::O200kBase => [
                (
                    concat!(
                        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
                        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
                        r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+$",
                    ),
                    false,
                ),
                (r"\s+\s", true),
                (r"\s+", false),
            ],
        }
    }
}

mod table {
    include!("bpe_table.rs");
}
use table::{token_hash, INLINE_BYTES, SLOT_BYTES};

/// A vocabulary: its tokens (the blob) and their hash table, both built into the library.
struct Ranks {
    blob: &'static [u8],
    slots: &'static [u8],
    mask: usize,
}

impl Ranks {
    fn new(blob: &'static [u8], slots: &'static [u8]) -> Ranks {
        let mask = (slots.len() / SLOT_BYTES).max(1) - 1;
        Ranks { blob, slots, mask }
    }

    #[inline]
    fn get(&self, bytes: &[u8]) -> Option<u32> {
        let mut slot = token_hash(bytes) & self.mask;
        loop {
            let entry: &[u8; SLOT_BYTES] = self
                .slots
                .get(slot * SLOT_BYTES..(slot + 1) * SLOT_BYTES)?
                .try_into()
                .ok()?;
            let len = usize::from(entry[0]);
            if len == 0 {
                return None;
            }
            if len == bytes.len() {
                let token = if len <= INLINE_BYTES {
                    &entry[4..4 + len]
                } else {
                    let at = u32::from_le_bytes([entry[4], entry[5], entry[6], entry[7]]) as usize;
                    self.blob.get(at + 1..at + 1 + len)?
                };
                if token == bytes {
                    return Some(u32::from_le_bytes([entry[1], entry[2], entry[3], 0]));
                }
            }
            slot = (slot + 1) & self.mask;
        }
    }

    /// The tokens, in rank order.
    fn tokens(&self) -> impl Iterator<Item = &'static [u8]> {
        let blob = self.blob;
        let mut at = 0;
        std::iter::from_fn(move || {
            let len = usize::from(*blob.get(at)?);
            let token = blob.get(at + 1..at + 1 + len)?;
            at += 1 + len;
            Some(token)
        })
    }
}

/// One encoding, ready to count.
pub struct Bpe {
    encoding: Encoding,
    ranks: Ranks,
    /// The rank of every 2-byte token, indexed by its bytes (`NONE` for the others): the first
    /// lookups of every merge, without hashing.
    pairs: Vec<u32>,
    splitter: Regex,
    lookahead: [bool; 3],
}

/// No pair: a rank above every token's.
const NONE: u32 = u32::MAX;
/// Pieces longer than this (in bytes) are merged with a heap.
const HEAP_FROM: usize = 128;

impl Bpe {
    /// The encoding, indexed on first use (then shared by every thread).
    pub fn get(encoding: Encoding) -> &'static Bpe {
        static CL100K: OnceLock<Bpe> = OnceLock::new();
        static O200K: OnceLock<Bpe> = OnceLock::new();
        let cell = match encoding {
            Encoding::Cl100kBase => &CL100K,
            Encoding::O200kBase => &O200K,
        };
        cell.get_or_init(|| Bpe::build(encoding))
    }

    fn build(encoding: Encoding) -> Bpe {
        let (blob, slots) = encoding.vocabulary();
        let ranks = Ranks::new(blob, slots);
        let patterns = encoding.patterns();
        let splitter = Regex::new_many(&patterns.map(|(pattern, _)| pattern))
            .unwrap_or_else(|error| unreachable!("the split patterns compile: {error}"));
        let mut pairs = vec![NONE; 1 << 16];
        for (rank, token) in ranks.tokens().enumerate() {
            if let [a, b] = *token {
                let slot = &mut pairs[usize::from(a) << 8 | usize::from(b)];
                *slot = (*slot).min(rank as u32);
            }
        }
        Bpe {
            encoding,
            pairs,
            ranks,
            splitter,
            lookahead: patterns.map(|(_, lookahead)| lookahead),
        }
    }

    /// How many tokens the vocabulary has.
    pub fn len(&self) -> usize {
        self.ranks.tokens().count()
    }

    pub fn is_empty(&self) -> bool {
        self.ranks.blob.is_empty()
    }

    /// The rank of a token, if `bytes` is one.
    pub fn rank(&self, bytes: &[u8]) -> Option<u32> {
        self.ranks.get(bytes)
    }

    /// Tokens of a Python str from its WTF-8 bytes (see `from_wtf8_lossy`).
    pub fn count_wtf8(&self, bytes: &[u8]) -> u64 {
        match std::str::from_utf8(bytes) {
            Ok(text) => self.count(text),
            Err(_) => self.count(&from_wtf8_lossy(bytes)),
        }
    }

    /// Tokens of `text`: `len(encode_ordinary(text))`.
    pub fn count(&self, text: &str) -> u64 {
        let bytes = text.as_bytes();
        let mut tokens = 0;
        let mut cache = None;
        let mut start = 0;
        while start < bytes.len() {
            let end = match ascii_piece_end(self.encoding, bytes, start) {
                Some(end) => end,
                None => {
                    let cache = cache.get_or_insert_with(|| self.splitter.create_cache());
                    self.regex_piece_end(cache, text, start)
                }
            };
            tokens += self.count_piece(&bytes[start..end]);
            start = end;
        }
        tokens
    }

    /// The end of the piece starting at `start`, by the split patterns.
    fn regex_piece_end(&self, cache: &mut Cache, text: &str, start: usize) -> usize {
        let input = Input::new(text).range(start..).anchored(Anchored::Yes);
        let next_char = start + text[start..].chars().next().map_or(1, char::len_utf8);
        // The last pattern takes any whitespace and the first any other character, so there
        // is always a match; were there none, the next character would be a piece.
        let Some(found) = self.splitter.search_with(cache, &input) else {
            return next_char;
        };
        let mut end = found.end();
        if self.lookahead[found.pattern().as_usize()] {
            let last = text[start..end]
                .chars()
                .next_back()
                .map_or(0, char::len_utf8);
            end -= last;
        }
        if end <= start {
            next_char
        } else {
            end
        }
    }

    /// Tokens of one piece of the split.
    fn count_piece(&self, piece: &[u8]) -> u64 {
        if piece.len() <= 1 || self.ranks.get(piece).is_some() {
            return u64::from(!piece.is_empty());
        }
        if piece.len() < HEAP_FROM {
            self.merge_scan(piece)
        } else {
            self.merge_heap(piece)
        }
    }

    fn pair_rank(&self, piece: &[u8], start: usize, end: usize) -> u32 {
        self.rank(&piece[start..end]).unwrap_or(NONE)
    }

    /// tiktoken's `byte_pair_merge`: `parts[i]` is the start of part `i` and the rank of part
    /// `i` joined to part `i + 1`.
    fn merge_scan(&self, piece: &[u8]) -> u64 {
        let n = piece.len();
        let mut parts: Vec<(usize, u32)> = Vec::with_capacity(n + 1);
        for (i, pair) in piece.windows(2).enumerate() {
            parts.push((
                i,
                self.pairs[usize::from(pair[0]) << 8 | usize::from(pair[1])],
            ));
        }
        parts.push((n - 1, NONE));
        parts.push((n, NONE));
        let joined = |parts: &[(usize, u32)], i: usize| {
            if i + 3 < parts.len() {
                self.pair_rank(piece, parts[i].0, parts[i + 3].0)
            } else {
                NONE
            }
        };
        loop {
            let mut best = (NONE, 0);
            for (i, &(_, rank)) in parts[..parts.len() - 1].iter().enumerate() {
                if rank < best.0 {
                    best = (rank, i);
                }
            }
            if best.0 == NONE {
                break;
            }
            let i = best.1;
            if i > 0 {
                parts[i - 1].1 = joined(&parts, i - 1);
            }
            parts[i].1 = joined(&parts, i);
            parts.remove(i + 1);
        }
        (parts.len() - 1) as u64
    }

    /// The same merges as [`Bpe::merge_scan`] in the same order, the lowest `(rank, start)`
    /// taken from a heap: parts are a linked list, stale heap entries are skipped.
    fn merge_heap(&self, piece: &[u8]) -> u64 {
        let n = piece.len();
        // Part i starts at byte i until merged away; `next`/`prev` link the parts alive.
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        // The rank of part i joined to its next part, as the heap should know it.
        let mut rank = vec![NONE; n];
        let mut heap = BinaryHeap::with_capacity(n);
        for (i, (pair, bytes)) in rank.iter_mut().zip(piece.windows(2)).enumerate() {
            *pair = self.pairs[usize::from(bytes[0]) << 8 | usize::from(bytes[1])];
            if *pair != NONE {
                heap.push(Reverse((*pair, i)));
            }
        }
        let mut parts = n as u64;
        let end_of = |next: &[usize], i: usize| if i < n { next[i] } else { n };
        while let Some(Reverse((r, i))) = heap.pop() {
            if !alive[i] || rank[i] != r {
                continue;
            }
            // Merge part i with the next one.
            let j = next[i];
            alive[j] = false;
            next[i] = next[j];
            if next[i] < n {
                prev[next[i]] = i;
            }
            parts -= 1;
            // New pairs: (i, its new next) and (prev, i).
            rank[i] = if next[i] < n {
                self.pair_rank(piece, i, end_of(&next, next[i]))
            } else {
                NONE
            };
            if rank[i] != NONE {
                heap.push(Reverse((rank[i], i)));
            }
            let p = prev[i];
            if p < n {
                rank[p] = self.pair_rank(piece, p, end_of(&next, i));
                if rank[p] != NONE {
                    heap.push(Reverse((rank[p], p)));
                }
            }
        }
        parts
    }
}

/// The class of an ASCII byte for the split; `None` for a byte of a non-ASCII character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ascii {
    Upper,
    Lower,
    Digit,
    Space,
    /// `\r` or `\n`.
    Newline,
    /// `\t`, `\x0b`, `\x0c`: whitespace that is neither a space nor a newline.
    OtherSpace,
    /// Everything else below 0x80: not a letter, digit or whitespace (`\x1c`-`\x1f` are not
    /// Unicode whitespace).
    Punct,
}

#[inline]
fn ascii(byte: u8) -> Option<Ascii> {
    Some(match byte {
        b'A'..=b'Z' => Ascii::Upper,
        b'a'..=b'z' => Ascii::Lower,
        b'0'..=b'9' => Ascii::Digit,
        b' ' => Ascii::Space,
        b'\r' | b'\n' => Ascii::Newline,
        b'\t' | 0x0b | 0x0c => Ascii::OtherSpace,
        0x80.. => return None,
        _ => Ascii::Punct,
    })
}

/// Where a split decision stands at byte `i`: the end of the text, an ASCII class, or a
/// non-ASCII character (which only the regex can classify).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    End,
    Byte(Ascii),
    Other,
}

#[inline]
fn at(bytes: &[u8], i: usize) -> At {
    match bytes.get(i) {
        None => At::End,
        Some(&b) => ascii(b).map_or(At::Other, At::Byte),
    }
}

fn is_letter(a: At) -> bool {
    matches!(a, At::Byte(Ascii::Upper | Ascii::Lower))
}

fn is_space(a: At) -> bool {
    matches!(
        a,
        At::Byte(Ascii::Space | Ascii::Newline | Ascii::OtherSpace)
    )
}

/// The end of the run of bytes from `i` that `keep` accepts; `None` if it stops at a non-ASCII
/// character (which might belong to the run).
#[inline]
fn run_end(bytes: &[u8], mut i: usize, keep: impl Fn(At) -> bool) -> Option<usize> {
    loop {
        let a = at(bytes, i);
        if a == At::Other {
            return None;
        }
        if !keep(a) {
            return Some(i);
        }
        i += 1;
    }
}

/// The end of the piece of the split that starts at `start`, found without the regex while
/// only ASCII decides it (the patterns read by hand, alternative by alternative, in order);
/// `None` where a non-ASCII character could change the answer.
fn ascii_piece_end(encoding: Encoding, bytes: &[u8], start: usize) -> Option<usize> {
    let At::Byte(first) = at(bytes, start) else {
        return None;
    };
    let next = at(bytes, start + 1);
    if next == At::Other {
        return None;
    }
    let o200k = encoding == Encoding::O200kBase;
    let lower = |i: usize| bytes.get(i).map(u8::to_ascii_lowercase);
    // cl100k: '(?i:[sdmt]|ll|ve|re)
    if !o200k && bytes[start] == b'\'' {
        if at(bytes, start + 2) == At::Other {
            return None;
        }
        match (lower(start + 1), lower(start + 2)) {
            (Some(b's' | b'd' | b'm' | b't'), _) => return Some(start + 2),
            (Some(b'l'), Some(b'l')) | (Some(b'v' | b'r'), Some(b'e')) => return Some(start + 3),
            _ => {}
        }
    }
    // Letters, after an optional character that is none of \r \n, a letter, a digit.
    let word = if is_letter(At::Byte(first)) {
        Some(start)
    } else if first != Ascii::Newline && first != Ascii::Digit && is_letter(next) {
        Some(start + 1)
    } else {
        None
    };
    if let Some(word) = word {
        let end = if o200k {
            // [UPPER]*[lower]+ or else [UPPER]+[lower]*, then an optional contraction.
            let uppers = run_end(bytes, word, |a| a == At::Byte(Ascii::Upper))?;
            let end = run_end(bytes, uppers, |a| a == At::Byte(Ascii::Lower))?;
            if bytes.get(end) == Some(&b'\'') {
                if at(bytes, end + 1) == At::Other || at(bytes, end + 2) == At::Other {
                    return None;
                }
                match (lower(end + 1), lower(end + 2)) {
                    (Some(b's' | b't' | b'm' | b'd'), _) => return Some(end + 2),
                    (Some(b'r' | b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => {
                        return Some(end + 3)
                    }
                    _ => {}
                }
            }
            end
        } else {
            run_end(bytes, word, is_letter)?
        };
        return Some(end);
    }
    // \p{N}{1,3}
    if first == Ascii::Digit {
        let mut end = start + 1;
        while end < start + 3 {
            match at(bytes, end) {
                At::Byte(Ascii::Digit) => end += 1,
                At::Other => return None,
                _ => break,
            }
        }
        return Some(end);
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*" (o200k: "[\r\n/]*")
    let punct = match (first, next) {
        (Ascii::Punct, _) => Some(start),
        (Ascii::Space, At::Byte(Ascii::Punct)) => Some(start + 1),
        _ => None,
    };
    if let Some(punct) = punct {
        let mut end = run_end(bytes, punct, |a| a == At::Byte(Ascii::Punct))?;
        while let Some(&b) = bytes.get(end) {
            if b == b'\r' || b == b'\n' || (o200k && b == b'/') {
                end += 1;
            } else {
                break;
            }
        }
        return Some(end);
    }
    // Whitespace: first is one (every other ASCII class is handled above).
    let run = run_end(bytes, start, is_space)?;
    let last_newline = bytes[start..run]
        .iter()
        .rposition(|&b| b == b'\r' || b == b'\n')
        .map(|i| start + i + 1);
    let to_end = run == bytes.len();
    Some(match (o200k, to_end, last_newline) {
        // cl100k: \s+$ first, then \s*[\r\n]; o200k: \s*[\r\n]+ first, then \s+$.
        (false, true, _) => run,
        (_, _, Some(newline)) => newline,
        (true, true, None) => run,
        // \s+(?!\S), then a lone \s
        _ if run - start >= 2 => run - 1,
        _ => run,
    })
}

/// Exact tokens of `text` in `encoding`.
pub fn count_text(encoding: Encoding, text: &str) -> u64 {
    Bpe::get(encoding).count(text)
}

/// `text` as tiktoken counts a Python str holding lone surrogates, from its UTF-8 bytes with
/// surrogates in their 3-byte form (WTF-8, `surrogatepass`): a high surrogate followed by a low
/// one is the character they encode in UTF-16, any other surrogate is U+FFFD (tiktoken goes
/// through `encode("utf-16", "surrogatepass").decode("utf-16", "replace")`). Malformed bytes
/// become U+FFFD too.
pub fn from_wtf8_lossy(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    // Lossy decoding turns each surrogate's 3 bytes into U+FFFD marks; redo them by hand.
    if !bytes.windows(2).any(|w| w[0] == 0xED && w[1] >= 0xA0) {
        return text.into_owned();
    }
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    let surrogate = |i: usize| -> Option<u32> {
        match bytes.get(i..i + 3) {
            Some([0xED, b1 @ 0xA0..=0xBF, b2 @ 0x80..=0xBF]) => {
                Some(0xD000 | (u32::from(b1 & 0x3F) << 6) | u32::from(b2 & 0x3F))
            }
            _ => None,
        }
    };
    while i < bytes.len() {
        if let Some(high) = surrogate(i) {
            if (0xD800..0xDC00).contains(&high) {
                if let Some(low @ 0xDC00..=0xDFFF) = surrogate(i + 3) {
                    let cp = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                    out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                    i += 6;
                    continue;
                }
            }
            out.push('\u{FFFD}');
            i += 3;
            continue;
        }
        // The valid UTF-8 up to the next surrogate.
        let mut end = i + 1;
        while end < bytes.len() && surrogate(end).is_none() {
            end += 1;
        }
        out.push_str(&String::from_utf8_lossy(&bytes[i..end]));
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabularies_are_whole() {
        assert_eq!(Bpe::get(Encoding::Cl100kBase).len(), 100_256);
        assert_eq!(Bpe::get(Encoding::O200kBase).len(), 199_998);
        for encoding in Encoding::ALL {
            let bpe = Bpe::get(encoding);
            for byte in 0..=255u8 {
                assert!(
                    bpe.rank(&[byte]).is_some(),
                    "{encoding:?} lacks byte {byte}"
                );
            }
            // The built table finds every token at its rank.
            for (rank, token) in bpe.ranks.tokens().enumerate() {
                assert_eq!(bpe.rank(token), Some(rank as u32), "{encoding:?} {token:?}");
            }
            assert_eq!(bpe.rank(b"\xff\xff\xff\xff not a token"), None);
            assert_eq!(Encoding::from_name(encoding.name()), Some(encoding));
        }
        assert_eq!(Encoding::from_name("p50k_base"), None);
    }

    #[test]
    fn known_counts() {
        // Token ids from tiktoken, for reference: cl100k "hello world" = [15339, 1917].
        let cl = |t: &str| count_text(Encoding::Cl100kBase, t);
        let o = |t: &str| count_text(Encoding::O200kBase, t);
        assert_eq!(cl(""), 0);
        assert_eq!(cl("hello world"), 2);
        assert_eq!(cl("a \n "), 3);
        assert_eq!(cl("x\n\n  \n"), 3);
        assert_eq!(cl("你好，世界。"), 7);
        assert_eq!(o("你好，世界。"), 4);
        assert_eq!(cl("😀😀😀"), 6);
        assert_eq!(o("😀😀😀"), 3);
        assert_eq!(o("x\n\n  \n"), 2);
    }

    #[test]
    fn heap_and_scan_merge_alike() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for encoding in Encoding::ALL {
            let bpe = Bpe::get(encoding);
            for len in [2, 3, 7, 40, 127, 128, 300] {
                for _ in 0..50 {
                    let piece: Vec<u8> = (0..len)
                        .map(|_| {
                            state ^= state << 13;
                            state ^= state >> 7;
                            state ^= state << 17;
                            b"abcde \xe4\xbd\xa0\xe5"[(state % 10) as usize]
                        })
                        .collect();
                    assert_eq!(bpe.merge_scan(&piece), bpe.merge_heap(&piece), "{piece:?}");
                }
            }
        }
    }

    /// Every piece the ASCII reading finds is the piece the patterns find.
    #[test]
    fn ascii_reading_splits_as_the_patterns() {
        let pieces = [
            "a",
            "Word",
            "HTMLParser",
            "ABC",
            "camelCase",
            "'s",
            "'LL",
            "'re",
            "'x",
            "don't",
            "I'M",
            "7",
            "12345",
            " ",
            "  ",
            "\n",
            "\r\n",
            " \n ",
            "\t",
            "\x0b",
            "\x0c",
            "\x1f",
            "{\"",
            "\": ",
            "!!",
            "/",
            "//",
            "!\n/",
            "-",
            "_",
            ".",
            "é",
            "你好",
            "\u{a0}",
            "\u{3000}",
            "\u{17f}",
            "\u{2028}",
            "²",
            "٣",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for encoding in Encoding::ALL {
            let bpe = Bpe::get(encoding);
            let mut cache = bpe.splitter.create_cache();
            let mut fast = 0;
            for _ in 0..20_000 {
                let mut text = String::new();
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                for _ in 0..(state >> 60) % 9 {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    text.push_str(pieces[(state % pieces.len() as u64) as usize]);
                }
                let mut start = 0;
                while start < text.len() {
                    let by_regex = bpe.regex_piece_end(&mut cache, &text, start);
                    if let Some(end) = ascii_piece_end(encoding, text.as_bytes(), start) {
                        assert_eq!(end, by_regex, "{encoding:?} {text:?} at {start}");
                        fast += 1;
                    }
                    start = by_regex;
                }
            }
            assert!(fast > 10_000, "{fast}");
        }
    }

    #[test]
    fn surrogates_as_tiktoken_reads_them() {
        assert_eq!(from_wtf8_lossy(b"a\xed\xa0\x80b"), "a\u{FFFD}b");
        assert_eq!(from_wtf8_lossy(b"\xed\xa0\xbd\xed\xb8\x80"), "\u{1F600}");
        assert_eq!(
            from_wtf8_lossy(b"\xed\xb8\x80\xed\xa0\xbd"),
            "\u{FFFD}\u{FFFD}"
        );
        assert_eq!(from_wtf8_lossy("你好".as_bytes()), "你好");
    }
}
