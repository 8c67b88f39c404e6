//! Tests of the TLS keys: every file checked at load, each refusal naming the file, the line
//! and the key (or the flag), and what a reload may not change.

use std::path::PathBuf;

use super::*;

const UPSTREAM: &str = "upstream = \"http://127.0.0.1:9000\"\n";

/// A directory of PEM files for one test.
struct Pems(PathBuf);

impl Pems {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "idempotency-proxy-tls-{test}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// A self-signed pair for `localhost`, as `name.crt` and `name.key`; their paths.
    fn pair(&self, name: &str) -> (String, String) {
        let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let cert = self.write(&format!("{name}.crt"), &pair.cert.pem());
        let key = self.write(&format!("{name}.key"), &pair.signing_key.serialize_pem());
        (cert, key)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

fn load_text(text: &str) -> Result<Settings, ConfigError> {
    load_str("config.toml", text, &Overrides::default())
}

#[test]
fn a_listener_pair_loads_prints_and_loads_back() {
    let pems = Pems::new("listener");
    let (cert, key) = pems.pair("server");
    let text = format!("{UPSTREAM}tls_cert = \"file:{cert}\"\ntls_key = \"file:{key}\"\n");
    let settings = load_text(&text).unwrap_or_else(|e| panic!("{e}"));
    let printed = settings.to_toml();
    assert!(
        printed.contains(&format!("tls_cert = \"file:{cert}\"")),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("tls_key = \"file:{key}\"")),
        "{printed}"
    );
    let again = load_text(&printed).unwrap();
    assert_eq!(format!("{settings:?}"), format!("{again:?}"));
}

#[test]
fn flags_take_a_bare_path_and_print_it_as_a_file_reference() {
    let pems = Pems::new("flags");
    let (cert, key) = pems.pair("server");
    let cli = Overrides {
        upstream: Some("http://127.0.0.1:9000".into()),
        tls_cert: Some(cert.clone()),
        tls_key: Some(format!("file:{key}")),
        ..Overrides::default()
    };
    let settings = load_str("(none)", "", &cli).unwrap_or_else(|e| panic!("{e}"));
    let tls = settings.tls.unwrap();
    assert_eq!(tls.cert_reference(), format!("file:{cert}"));
    assert_eq!(tls.key_reference(), format!("file:{key}"));
    let missing = Overrides {
        tls_cert: Some("/no/such/server.crt".into()),
        ..cli
    };
    let message = load_str("(none)", "", &missing).unwrap_err().to_string();
    assert!(
        message.starts_with("--tls-cert: cannot read \"/no/such/server.crt\""),
        "{message}"
    );
}

#[test]
fn a_missing_mismatched_or_half_pair_is_refused_naming_the_file() {
    let pems = Pems::new("refused");
    let (cert, key) = pems.pair("one");
    let (_, other_key) = pems.pair("two");
    let pair = |cert: &str, key: &str| {
        load_text(&format!(
            "{UPSTREAM}tls_cert = \"{cert}\"\ntls_key = \"{key}\"\n"
        ))
        .unwrap_err()
        .to_string()
    };
    let message = pair("file:/no/such.crt", &format!("file:{key}"));
    assert!(
        message.starts_with("config.toml:2: key \"tls_cert\": cannot read \"/no/such.crt\""),
        "{message}"
    );
    let message = pair(&format!("file:{cert}"), &format!("file:{other_key}"));
    assert!(
        message.starts_with("config.toml:3: key \"tls_key\": the key in"),
        "{message}"
    );
    assert!(
        message.contains(&other_key) && message.contains(&cert),
        "{message}"
    );
    let message = pair(&format!("file:{cert}"), &format!("file:{cert}"));
    assert!(message.contains("holds no PEM private key"), "{message}");
    let message = pair(&cert, &format!("file:{key}"));
    assert!(message.contains("expected \"file:PATH\""), "{message}");
    let half = load_text(&format!("{UPSTREAM}tls_cert = \"file:{cert}\"\n")).unwrap_err();
    assert!(
        half.to_string()
            .starts_with("config.toml:2: key \"tls_key\": the listener needs both"),
        "{half}"
    );
}

#[test]
fn upstream_tls_keys_are_inherited_checked_and_printed() {
    let pems = Pems::new("upstream");
    let (ca, _) = pems.pair("ca");
    let (client_cert, client_key) = pems.pair("client");
    let (_, stranger_key) = pems.pair("stranger");
    let text = format!(
        "[defaults]\nupstream_ca = \"file:{ca}\"\n[[routes]]\nname = \"psp\"\npath_prefix = \"/\"\nupstream = \"https://localhost:8443\"\nupstream_client_cert = \"file:{client_cert}\"\nupstream_client_key = \"file:{client_key}\"\n"
    );
    let settings = load_text(&text).unwrap_or_else(|e| panic!("{e}"));
    let tls = &settings.routes[0].upstream_tls;
    assert_eq!(tls.ca_reference(), Some(format!("file:{ca}").as_str()));
    assert!(tls.client_config_for_https().is_some());
    let printed = settings.to_toml();
    assert!(
        printed.contains(&format!("upstream_client_key = \"file:{client_key}\"")),
        "{printed}"
    );
    let again = load_text(&printed).unwrap();
    assert_eq!(format!("{settings:?}"), format!("{again:?}"));

    let stranger = text.replace(&client_key, &stranger_key);
    let message = load_text(&stranger).unwrap_err().to_string();
    assert!(
        message.starts_with("config.toml:8: key \"upstream_client_key\": the key in"),
        "{message}"
    );
    let alone = text.replace(
        &format!("upstream_client_key = \"file:{client_key}\"\n"),
        "",
    );
    let message = load_text(&alone).unwrap_err().to_string();
    assert!(
        message.starts_with("config.toml:7: key \"upstream_client_key\": set"),
        "{message}"
    );
    let bad_ca = text.replace(&ca, "/no/such/ca.pem");
    let message = load_text(&bad_ca).unwrap_err().to_string();
    assert!(
        message.starts_with("config.toml:2: key \"upstream_ca\": cannot read \"/no/such/ca.pem\""),
        "{message}"
    );
}

#[test]
fn a_reload_may_not_change_the_listeners_or_the_store() {
    let pems = Pems::new("reload");
    let (cert, key) = pems.pair("server");
    let running = load_text(&format!("{UPSTREAM}store = \"memory\"\n")).unwrap();
    let file = pems.write(
        "config.toml",
        &format!("{UPSTREAM}store = \"memory\"\nlisten = \"127.0.0.1:8080\"\n"),
    );
    let cli = Overrides {
        config: Some(file.clone().into()),
        ..Overrides::default()
    };
    assert!(load_for_reload(&cli, &running).is_ok());
    let refused = |text: String| {
        std::fs::write(&file, text).unwrap();
        load_for_reload(&cli, &running).unwrap_err().to_string()
    };
    let message = refused(format!("{UPSTREAM}\nstore = \"file:/tmp/x.db\"\n"));
    assert!(
        message.starts_with(&format!(
            "{file}:3: key \"store\": memory -> file:/tmp/x.db needs a restart"
        )),
        "{message}"
    );
    let message = refused(format!(
        "{UPSTREAM}store = \"memory\"\nadmin_listen = \"127.0.0.1:9090\"\n"
    ));
    assert!(
        message.contains("key \"admin_listen\": off -> 127.0.0.1:9090"),
        "{message}"
    );
    let message = refused(format!(
        "{UPSTREAM}store = \"memory\"\ntls_cert = \"file:{cert}\"\ntls_key = \"file:{key}\"\n"
    ));
    assert!(
        message.contains(":3: key \"tls_cert\": plain HTTP -> HTTPS needs a restart"),
        "{message}"
    );
    let message = refused(format!(
        "{UPSTREAM}store = \"memory\"\nlog_format = \"json\"\n"
    ));
    assert!(
        message.contains(":3: key \"log_format\": text -> json"),
        "{message}"
    );
    let message = refused(UPSTREAM.to_owned());
    assert!(message.contains(":1: key \"store\""), "{message}");
}
