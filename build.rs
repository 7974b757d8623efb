//! Builds the hash tables of the vocabularies built into the library (`rust/bpe.rs`), so the
//! first use of an encoding does not index its 100,000-200,000 tokens.

use std::path::PathBuf;

include!("rust/bpe_table.rs");

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for name in ["cl100k_base", "o200k_base"] {
        let source = format!("rust/vocab/{name}.bin");
        println!("cargo::rerun-if-changed={source}");
        let blob = std::fs::read(&source).expect("the vocabulary is in the source tree");
        std::fs::write(out.join(format!("{name}.slots")), build_slots(&blob))
            .expect("OUT_DIR is writable");
    }
    println!("cargo::rerun-if-changed=rust/bpe_table.rs");
    println!("cargo::rerun-if-changed=build.rs");
}
