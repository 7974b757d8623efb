// The hash table of a vocabulary, shared by `build.rs` (which builds the tables into the
// library) and `rust/bpe.rs` (which reads them): included by both with `include!`.
//
// A vocabulary blob is every token in rank order, each a length byte then its bytes. Its table
// has a power of two of slots, at least twice the tokens, each 8 little-endian bytes: the
// offset of the token's length byte in the blob, then its rank (`u32::MAX` in an empty slot).
// Linear probing from `token_hash(token)`.

/// The rank of an empty slot.
pub const EMPTY_SLOT: u32 = u32::MAX;
/// Bytes per slot.
pub const SLOT_BYTES: usize = 8;

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
    for slot in slots.chunks_exact_mut(SLOT_BYTES) {
        slot[4..].copy_from_slice(&EMPTY_SLOT.to_le_bytes());
    }
    for (rank, &(at, token)) in tokens.iter().enumerate() {
        let mut slot = token_hash(token) & mask;
        loop {
            let entry = &mut slots[slot * SLOT_BYTES..(slot + 1) * SLOT_BYTES];
            let taken = u32::from_le_bytes([entry[4], entry[5], entry[6], entry[7]]);
            if taken == EMPTY_SLOT {
                entry[..4].copy_from_slice(&(at as u32).to_le_bytes());
                entry[4..].copy_from_slice(&(rank as u32).to_le_bytes());
                break;
            }
            let other = u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]) as usize;
            let other_len = usize::from(blob[other]);
            if &blob[other + 1..other + 1 + other_len] == token {
                break;
            }
            slot = (slot + 1) & mask;
        }
    }
    slots
}
