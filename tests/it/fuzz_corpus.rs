//! Replays the kept corpus of the proxy's fuzz target (`fuzz/corpus/config/`) through the check
//! the target runs (`fuzz/config.rs`), on stable Rust, so every `cargo test` re-checks what
//! fuzzing once found. The core's targets replay theirs in `crates/core/tests/it/fuzz_corpus.rs`.

#[path = "fuzz/config.rs"]
mod check;

use std::path::Path;

#[test]
fn every_config_corpus_file_passes_its_target_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/config");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no corpus", dir.display());
    for path in &files {
        let data = std::fs::read(path).unwrap();
        let outcome = std::panic::catch_unwind(|| check::config(&data));
        assert!(outcome.is_ok(), "config: {} fails", path.display());
    }
    println!("config: {} inputs", files.len());
}
