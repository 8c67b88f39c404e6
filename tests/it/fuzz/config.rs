//! The property the proxy's `config` fuzz target checks. The target in `fuzz/` includes this
//! file and calls it on every input, and `tests/it/fuzz_corpus.rs` on every file of the kept
//! corpus. (The core's targets check the core's code from `crates/core/tests/it/fuzz/`.)

use idempotency_proxy::config::Overrides;

/// Config text: loading never panics, an error is one line, and a configuration that loads
/// prints (`--check`) as a file that loads to the same configuration.
pub(crate) fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if may_read_files(text) {
        return;
    }
    let cli = Overrides::default();
    match idempotency_proxy::config::load_str("fuzz.toml", text, &cli) {
        Err(e) => {
            let line = e.to_string();
            assert!(
                !line.is_empty() && !line.contains(['\n', '\r']),
                "the error is not one line: {line:?}"
            );
        }
        Ok(settings) => {
            let printed = settings.to_toml();
            let again = idempotency_proxy::config::load_str("printed.toml", &printed, &cli)
                .unwrap_or_else(|e| panic!("the printed config does not load: {e}\n{printed}"));
            assert_eq!(again.to_toml(), printed, "printing is not stable");
        }
    }
}

/// `admin_token = "file:PATH"` reads a file, and a fuzzer must not read `/dev/zero`. A key can
/// be spelt with `\u` escapes, a value with any escape or a line-ending backslash, so text that
/// might spell both is left out.
fn may_read_files(text: &str) -> bool {
    let key = text.contains("admin_token") || text.contains("\\u") || text.contains("\\U");
    key && (text.contains("file") || text.contains('\\'))
}
