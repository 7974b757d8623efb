// The hash table of a vocabulary, shared by `build.rs` (which builds the tables into the
// library) and `rust/bpe.rs` (which reads them): included by both with `include!`.
//
// A vocabulary blob is every token in rank order, each a length byte then its bytes. Its table
// has a power of two of slots, at least twice the tokens, each 16 bytes: the token's length (0 in an
// empty slot), its rank (3 bytes, little-endian), then the token itself when it has at most 12
// bytes (nearly all do: one cache line read per lookup), or else the offset of its length byte
// in the blob (4 bytes, little-endian). Linear probing from `token_hash(token)`.

/// Bytes per slot.
pub const SLOT_BYTES: usize = 16;
/// The longest token kept in its slot.
pub const INLINE_BYTES: usize = 12;

/// FxHash (rustc's hasher) over 8-byte words, seeded with the length.
#[inline]
pub fn token_hash(bytes: &[u8]) -> usize {
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut h = (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
    }
    (h ^ (h >> 29)) as usize
}

/// The table of `blob` (see above). A token met twice keeps its first rank.
#[allow(dead_code)]
pub fn build_slots(blob: &[u8]) -> Vec<u8> {
    let mut tokens = Vec::new();
    let mut at = 0;
    while let Some(&len) = blob.get(at) {
        let end = (at + 1 + usize::from(len)).min(blob.len());
        tokens.push((at, &blob[at + 1..end]));
        at = end;
    }
    let size = (tokens.len() * 2).next_power_of_two().max(16);
    let mask = size - 1;
    let mut slots = vec![0u8; size * SLOT_BYTES];
    let token_at = |entry: &[u8]| -> Vec<u8> {
        let len = usize::from(entry[0]);
        if len <= INLINE_BYTES {
            entry[4..4 + len].to_vec()
        } else {
            let at = u32::from_le_bytes([entry[4], entry[5], entry[6], entry[7]]) as usize;
            blob[at + 1..at + 1 + len].to_vec()
        }
    };
    for (rank, &(at, token)) in tokens.iter().enumerate() {
        assert!(!token.is_empty() && rank < 1 << 24, "a token is empty or past rank 2^24");
        let mut slot = token_hash(token) & mask;
        loop {
            let entry = &mut slots[slot * SLOT_BYTES..(slot + 1) * SLOT_BYTES];
            if entry[0] == 0 {
                entry[0] = token.len() as u8;
                entry[1..4].copy_from_slice(&(rank as u32).to_le_bytes()[..3]);
                if token.len() <= INLINE_BYTES {
                    entry[4..4 + token.len()].copy_from_slice(token);
                } else {
                    entry[4..8].copy_from_slice(&(at as u32).to_le_bytes());
                }
                break;
            }
            if token_at(entry) == token {
                break;
            }
            slot = (slot + 1) & mask;
        }
    }
    slots
}
