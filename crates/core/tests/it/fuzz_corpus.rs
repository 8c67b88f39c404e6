//! Replays the kept corpus of each of the core's fuzz targets (`fuzz/corpus/<target>/` at the
//! top of the repository) through the same checks the targets run (`fuzz/checks.rs`), on stable
//! Rust, so every `cargo test` re-checks what fuzzing once found.

#[path = "fuzz/checks.rs"]
mod checks;

use std::path::Path;

#[test]
fn every_corpus_file_passes_its_target_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for (target, check) in checks::TARGETS {
        let dir = root.join(target);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} holds no corpus", dir.display());
        for path in &files {
            let data = std::fs::read(path).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{target}: {} fails", path.display());
        }
        println!("{target}: {} inputs", files.len());
    }
}
