//! Tests of the `[[outboxes]]` tables (docs/reference.md#outbox-keys): every key read, the
//! defaults, a relay-only config, `--check` without secrets, and refusals naming the file,
//! line and key.

use std::time::Duration;

use crate::config::*;
use idempotency_outbox::OnDead;

fn load_text(text: &str) -> Result<Settings, ConfigError> {
    load_str("config.toml", text, &Overrides::default())
}

fn refusal(text: &str) -> String {
    load_text(text).unwrap_err().to_string()
}

const EVERY_KEY: &str = r#"
[[outboxes]]
name = "payments"
database = "env:OUTBOX_TESTS_DATABASE_URL"
table = "app.outbox"
deliver_to = "http://127.0.0.1:9001/events"
topics = { "payment.confirmed" = "https://fulfilment.internal/hooks/payments" }
method = "PUT"
signing_secret = "env:OUTBOX_TESTS_SIGNING_SECRET"
poll_interval = "250ms"
notify_channel = "outbox"
deliver_concurrency = 8
destination_concurrency = 3
deliver_timeout = "10s"
retry_initial = "2s"
retry_max = "5m"
max_attempts = 12
max_age = "24h"
lease = "1m"
on_dead = "block"
keep_delivered = "0s"
"#;

/// The `file:` references the configs of these tests name. Files, not `env:`: the
/// environment is the whole process's, shared by every test thread.
struct Secrets {
    database: String,
    signing: String,
    amqp: String,
}

fn secrets() -> &'static Secrets {
    static SECRETS: std::sync::OnceLock<Secrets> = std::sync::OnceLock::new();
    SECRETS.get_or_init(|| Secrets {
        database: secret_file(
            "database",
            "postgres://relay:hunter2@db.internal:5432/payments",
        ),
        signing: secret_file("signing", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        amqp: secret_file("amqp", "amqp://relay:hunter2@mq.internal:5672/orders"),
    })
}

fn secret_file(name: &str, value: &str) -> String {
    let path =
        std::env::temp_dir().join(format!("outbox-config-tests-{}-{name}", std::process::id()));
    std::fs::write(&path, value).unwrap();
    format!("file:{}", path.display())
}

/// [`EVERY_KEY`] with its secret references pointing at this process's files.
fn every_key() -> String {
    let secrets = secrets();
    EVERY_KEY
        .replace("env:OUTBOX_TESTS_DATABASE_URL", &secrets.database)
        .replace("env:OUTBOX_TESTS_SIGNING_SECRET", &secrets.signing)
}

#[test]
fn every_key_is_read_and_a_config_of_outboxes_alone_is_a_relay_only_process() {
    let settings = load_text(&every_key()).unwrap();
    assert!(settings.routes.is_empty(), "relay only");
    let outbox = &settings.outboxes[0];
    let relay = &outbox.relay;
    assert_eq!(relay.name.as_str(), "payments");
    assert_eq!(
        outbox.database.to_string(),
        "postgres://relay@db.internal:5432/payments"
    );
    assert_eq!(relay.table.quoted(), "\"app\".\"outbox\"");
    assert_eq!(relay.destination("other").unwrap().path(), "/events");
    let topic = relay.destination("payment.confirmed").unwrap();
    assert_eq!(topic.host(), Some("fulfilment.internal"));
    assert_eq!(relay.method, http::Method::PUT);
    assert!(relay.signer.is_some());
    assert_eq!(relay.poll_interval, Duration::from_millis(250));
    assert_eq!(relay.notify_channel.as_deref(), Some("outbox"));
    assert_eq!(relay.deliver_concurrency, 8);
    assert_eq!(relay.destination_concurrency, Some(3));
    assert_eq!(relay.deliver_timeout, Duration::from_secs(10));
    assert_eq!(relay.retry.initial, Duration::from_secs(2));
    assert_eq!(relay.retry.max, Duration::from_secs(300));
    assert_eq!(relay.max_attempts, 12);
    assert_eq!(relay.max_age, Duration::from_secs(86_400));
    assert_eq!(relay.lease, Duration::from_secs(60));
    assert_eq!(relay.on_dead, OnDead::Block);
    assert_eq!(relay.keep_delivered, Duration::ZERO);
    // An https:// topic: the client config is built.
    assert!(outbox.upstream_tls.client_config_for_https().is_some());
}

#[test]
fn defaults_are_the_documented_ones() {
    let text = "[[outboxes]]\nname = \"o\"\ndatabase = \"postgres://u@h/d\"\ndeliver_to = \"http://127.0.0.1:9/\"\n";
    let settings = load_text(text).unwrap();
    let relay = &settings.outboxes[0].relay;
    assert_eq!(relay.table.as_str(), "outbox");
    assert_eq!(relay.method, http::Method::POST);
    assert!(relay.signer.is_none() && relay.notify_channel.is_none());
    assert_eq!(relay.poll_interval, Duration::from_millis(500));
    assert_eq!(relay.deliver_concurrency, 16);
    assert_eq!(
        (relay.destination_concurrency, relay.destination_limit()),
        (None, 16),
        "every slot, unless told otherwise"
    );
    assert!(settings.to_toml().contains("destination_concurrency = 16"));
    assert_eq!(relay.deliver_timeout, Duration::from_secs(30));
    assert_eq!(relay.retry.initial, Duration::from_secs(1));
    assert_eq!(relay.retry.max, Duration::from_secs(600));
    assert_eq!(relay.max_attempts, 20);
    assert_eq!(relay.max_age, Duration::from_secs(72 * 3600));
    assert_eq!(relay.lease, Duration::from_secs(30));
    assert_eq!(relay.on_dead, OnDead::Skip);
    assert_eq!(relay.keep_delivered, Duration::from_secs(86_400));
    assert!(settings.outboxes[0]
        .upstream_tls
        .client_config_for_https()
        .is_none());
}

#[test]
fn check_prints_references_never_secrets_and_loads_back_the_same() {
    let with_routes = format!("upstream = \"http://127.0.0.1:9000\"\n{}", every_key());
    let inline = with_routes.replace(
        &secrets().database,
        "postgres://relay:hunter2@db.internal:5432/payments",
    );
    for text in [with_routes.as_str(), inline.as_str()] {
        let printed = load_text(text).unwrap().to_toml();
        assert!(
            !printed.contains("hunter2") && !printed.contains("whsec_"),
            "{printed}"
        );
        assert!(printed.contains("[[outboxes]]") && printed.contains("on_dead = \"block\""));
        let signing = format!("signing_secret = \"{}\"", secrets().signing);
        assert!(printed.contains(&signing), "{printed}");
        let again = load_text(&printed).unwrap().to_toml();
        assert_eq!(again, printed);
    }
    let printed = load_text(&inline).unwrap().to_toml();
    assert!(printed.contains("database = \"postgres://relay@db.internal:5432/payments\""));
}

#[test]
fn refusals_name_the_file_line_and_key() {
    let database = &secrets().database;
    let not_whsec =
        format!("config.toml:5: key \"signing_secret\": the secret in {database} must be whsec_");
    let base = "[[outboxes]]\nname = \"o\"\ndatabase = \"postgres://u@h/d\"\ndeliver_to = \"http://127.0.0.1:9/\"\n";
    let cases = [
        (format!("{base}retries = 3\n"), "config.toml:5: unknown key \"retries\""),
        (format!("{base}on_dead = \"maybe\"\n"), "config.toml:5: key \"on_dead\""),
        (format!("{base}retry_initial = \"1m\"\nretry_max = \"1s\"\n"), "config.toml:6: key \"retry_max\": retry_max must be at least retry_initial"),
        (format!("{base}deliver_concurrency = 0\n"), "config.toml:5: key \"deliver_concurrency\": 0 is outside 1..=65536"),
        (format!("{base}destination_concurrency = 0\n"), "config.toml:5: key \"destination_concurrency\": 0 is outside 1..=65536"),
        (format!("{base}deliver_concurrency = 4\ndestination_concurrency = 8\n"), "config.toml:6: key \"destination_concurrency\": 8 is more than deliver_concurrency (4)"),
        (format!("{base}poll_interval = \"0s\"\n"), "config.toml:5: key \"poll_interval\""),
        (format!("{base}signing_secret = \"whsec_abc\"\n"), "config.toml:5: key \"signing_secret\": a secret is given as"),
        (format!("{base}signing_secret = \"{database}\"\n"), not_whsec.as_str()),
        (format!("{base}topics = {{ \"a\" = \"ftp://x/\" }}\n"), "config.toml:5: key \"topics\": topic \"a\": invalid destination URL"),
        (format!("{base}table = \"a.b.c\"\n"), "config.toml:5: key \"table\""),
        (format!("{base}name = \"x\"\n"), "config.toml:5: key \"name\": duplicate key"),
        (format!("{base}{base}"), "config.toml:6: key \"name\": outbox name \"o\" is already used on line 1"),
        ("[[outboxes]]\nname = \"o\"\ndeliver_to = \"http://h:1/\"\n".to_owned(), "config.toml:1: key \"database\": every [[outboxes]] table needs a database"),
        ("[[outboxes]]\nname = \"o\"\ndatabase = \"mysql://h/d\"\ndeliver_to = \"http://h:1/\"\n".to_owned(), "config.toml:3: key \"database\": database URL: expected postgres://"),
        ("[[outboxes]]\nname = \"o\"\ndatabase = \"postgres://u@h/d\"\n".to_owned(), "config.toml:1: key \"deliver_to\": an outbox needs deliver_to"),
        ("[[outboxes]]\nname = \"o o\"\n".to_owned(), "config.toml:2: key \"name\": outbox name \"o o\""),
    ];
    for (text, expected) in cases {
        let refused = refusal(&text);
        assert!(refused.starts_with(expected), "{text}\n=> {refused}");
    }
}

#[test]
fn a_config_with_routes_and_outboxes_serves_both_and_one_with_neither_is_refused() {
    let text = "upstream = \"http://127.0.0.1:9000\"\n[[outboxes]]\nname = \"o\"\ndatabase = \"postgres://u@h/d\"\ndeliver_to = \"http://127.0.0.1:9/\"\n";
    let settings = load_text(text).unwrap();
    assert_eq!((settings.routes.len(), settings.outboxes.len()), (1, 1));
    assert!(matches!(load_text(""), Err(ConfigError::NoUpstream)));
}

#[test]
fn the_example_configs_outbox_loads_once_uncommented() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let example = std::fs::read_to_string(path).unwrap();
    let block = example.split_once("# [[outboxes]]").unwrap().1;
    let mut text = "[[outboxes]]".to_owned();
    for line in block.lines().skip(1).take_while(|l| l.starts_with("# ")) {
        text.push('\n');
        text.push_str(&line[2..]);
    }
    let text = text
        .replace("env:OUTBOX_DATABASE_URL", &secrets().database)
        .replace("env:OUTBOX_SIGNING_SECRET", &secrets().signing);
    let refused = load_text(&text).unwrap_err().to_string();
    // Everything but the CA file, which the example only names.
    assert!(refused.contains("key \"upstream_ca\""), "{refused}");
    let without_ca = text.replace("upstream_ca = \"file:ca.pem\"", "");
    let settings = load_text(&without_ca).unwrap();
    assert_eq!(settings.outboxes[0].relay.name.as_str(), "payments");
    assert_eq!(settings.outboxes[0].relay.topics.len(), 1);
}

#[test]
fn a_reload_may_not_change_the_outboxes_nor_turn_a_relay_only_process_into_a_proxy() {
    let outbox = "[[outboxes]]\nname = \"o\"\ndatabase = \"postgres://u@h/d\"\ndeliver_to = \"http://127.0.0.1:9/\"\n";
    let running = load_text(outbox).unwrap();
    let file = std::env::temp_dir().join(format!("outbox-reload-{}.toml", std::process::id()));
    let cli = Overrides {
        config: Some(file.clone()),
        ..Overrides::default()
    };
    let reload = |text: &str| {
        std::fs::write(&file, text).unwrap();
        load_for_reload(&cli, &running).map_err(|e| e.to_string())
    };
    assert!(reload(outbox).is_ok(), "the same outboxes");
    let changed =
        reload(&outbox.replace("http://127.0.0.1:9/", "http://127.0.0.1:10/")).unwrap_err();
    assert!(
        changed.contains(":1: key \"outboxes\": [o] -> [o] (or their keys) needs a restart"),
        "{changed}"
    );
    let renamed = reload(&outbox.replace("name = \"o\"", "name = \"p\"")).unwrap_err();
    assert!(renamed.contains("[o] -> [p]"), "{renamed}");
    let routes = reload(&format!("upstream = \"http://127.0.0.1:9000\"\n{outbox}")).unwrap_err();
    assert!(
        routes.contains("key \"routes\": a relay-only process -> routes needs a restart"),
        "{routes}"
    );
    let _ = std::fs::remove_file(&file);
}

#[test]
fn broker_destinations_are_read_and_check_shows_no_credentials() {
    let text = r#"
[[outboxes]]
name = "payments"
database = "postgres://u@h/d"
deliver_to = "nats://relay:hunter2@127.0.0.1:4222"
nats_subject_prefix = "events."
topics = { "payment.confirmed" = "AMQP_REF" }
amqp_exchange = "events"
"#
    .replace("AMQP_REF", &secrets().amqp);
    let settings = load_text(&text).unwrap();
    let relay = &settings.outboxes[0].relay;
    assert_eq!(relay.nats_subject_prefix, "events.");
    assert_eq!(relay.amqp_exchange, "events");
    let amqp = &relay.topics["payment.confirmed"];
    assert_eq!(amqp.host(), Some("mq.internal"));
    let printed = settings.to_toml();
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(
        printed.contains("deliver_to = \"nats://relay:***@127.0.0.1:4222/\""),
        "{printed}"
    );
    assert!(
        printed.contains("\"payment.confirmed\" = \"amqp://relay:***@mq.internal:5672/orders\"")
    );
    assert!(printed.contains("nats_subject_prefix = \"events.\""));
    let base = "[[outboxes]]\nname = \"o\"\ndatabase = \"postgres://u@h/d\"\ndeliver_to = \"nats://127.0.0.1:4222\"\n";
    let wildcard = refusal(&format!("{base}nats_subject_prefix = \"events.>\"\n"));
    assert!(
        wildcard.starts_with("config.toml:5: key \"nats_subject_prefix\""),
        "{wildcard}"
    );
    let leaked = refusal("[[outboxes]]\nname = \"o\"\ndatabase = \"postgres://u@h/d\"\ndeliver_to = \"http://u:hunter2@h/\"\n");
    assert!(
        leaked.contains("user info") && !leaked.contains("hunter2"),
        "{leaked}"
    );
}

#[test]
fn the_connection_keys_are_read_printed_and_refused_with_their_key() {
    let base = "[[outboxes]]\nname = \"o\"\ndatabase = \"postgres://u@h/d\"\ndeliver_to = \"http://127.0.0.1:9/\"\n";
    let defaults = load_text(base).unwrap();
    let connection = &defaults.outboxes[0].connection;
    assert_eq!(
        (connection.pool_size, connection.statement_timeout),
        (6, Duration::from_secs(5))
    );
    assert!(connection.ca.is_none());
    let printed = defaults.to_toml();
    assert!(
        printed.contains("pool_size = 6") && printed.contains("statement_timeout = \"5s\""),
        "{printed}"
    );

    let set = load_text(&format!(
        "{base}pool_size = 3\nstatement_timeout = \"750ms\"\nkeep_dead = \"30d\"\n"
    ))
    .unwrap();
    assert_eq!(
        set.outboxes[0].relay.keep_dead,
        Some(Duration::from_secs(30 * 86_400))
    );
    assert_eq!(
        defaults.outboxes[0].relay.keep_dead, None,
        "kept until deleted"
    );
    let connection = &set.outboxes[0].connection;
    assert_eq!(
        (connection.pool_size, connection.statement_timeout),
        (3, Duration::from_millis(750))
    );
    assert_eq!(load_text(&set.to_toml()).unwrap().to_toml(), set.to_toml());

    for (line, key) in [
        ("pool_size = 0\n", "pool_size"),
        ("statement_timeout = \"soon\"\n", "statement_timeout"),
        ("database_ca = \"file:/no/such/ca.pem\"\n", "database_ca"),
    ] {
        let refused = refusal(&format!("{base}{line}"));
        assert!(refused.contains(&format!("key \"{key}\"")), "{refused}");
    }
}
