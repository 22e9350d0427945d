//! Replays every saved fuzz corpus (`fuzz/corpus/<target>/*`) through the fuzz targets' own bodies
//! (`gangway::fuzzing`), so that every input a fuzzer kept, including each one that once found a bug,
//! is checked on every test run, in seconds and without a nightly compiler. `fuzz/README.md` says how to
//! fuzz for longer.

use std::path::Path;

use gangway::fuzzing::TARGETS;

#[test]
fn every_saved_fuzz_input_still_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (name, target) in TARGETS {
        let dir = root.join(name);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}: every target keeps a corpus", dir.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{}: an empty corpus", dir.display());
        for input in inputs {
            let bytes = std::fs::read(&input).unwrap();
            // A panic names the input, to reproduce with `cargo fuzz run <target> <input>`.
            let outcome = std::panic::catch_unwind(|| target(&bytes));
            assert!(outcome.is_ok(), "{} fails", input.display());
        }
    }
}

#[test]
fn every_target_has_a_fuzz_binary() {
    let targets = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
    for (name, _) in TARGETS {
        let source = targets.join(format!("{name}.rs"));
        let text = std::fs::read_to_string(&source)
            .unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        assert!(
            text.contains(&format!("gangway::fuzzing::{name}(")),
            "{} does not call gangway::fuzzing::{name}",
            source.display()
        );
    }
}
