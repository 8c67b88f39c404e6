//! The image, as a user runs it: built with podman from the Dockerfile around the binaries of
//! this test build (`BINARIES=prebuilt`), started with a volume for the file store and a published port, in front
//! of the demo upstream's image on a network of its own. A keyed request and its replay go
//! through it, the replay survives `podman restart` and a new container on the same volume, the
//! proxy runs as an unprivileged user, `podman healthcheck run` passes, and `podman stop` lets
//! a request in flight finish and exits 0. `docker-compose.yml` comes up with podman-compose and
//! a retry through its second replica is replayed from the Redis both share.
//!
//! Without podman or the base images the tests say SKIPPED and pass, unless `REQUIRE_PODMAN=1`
//! (as `.ci/test` sets it; `.ci/setup` installs podman and makes the base images).
//!
//! A binary of its own, outside `tests/it/`: it takes minutes, runs containers that outlive any
//! one test, and needs podman and the base images; `cargo test --test it` runs everything else
//! without it, and `cargo test --test container` runs it alone.

#[path = "container/podman.rs"]
mod podman;

use std::net::SocketAddr;
use std::time::Duration;

use idempotency_test_support::client::{Answer, TestClient};
use idempotency_test_support::poll;
use podman::{Images, Made};

const BODY: &str = "{\"amount\":100}";

/// How long a container may take to answer after it starts.
const STARTING: Duration = Duration::from_secs(60);

/// A network of the test's own, the demo upstream on it, and the proxies it starts there.
struct Scene {
    images: &'static Images,
    made: Made,
    network: String,
    /// The demo upstream, as the proxies reach it: `http://NAME:9000`.
    upstream: String,
}

impl Scene {
    async fn new(images: &'static Images, what: &str) -> Self {
        let mut made = Made::default();
        let network = made.network(&format!("{what}-net"));
        let name = made.container(
            &format!("{what}-upstream"),
            &["--network", &network, &images.demo_upstream],
        );
        until_listening(&name).await;
        Self {
            images,
            made,
            network,
            upstream: format!("http://{name}:9000"),
        }
    }

    /// The proxy's image in front of the demo upstream, with `options` before the image; its
    /// port and admin port published on loopback, at ports podman picks.
    fn proxy(&mut self, what: &str, options: &[&str]) -> String {
        let mut args = vec!["--network", &self.network];
        args.extend([
            "--publish",
            "127.0.0.1::8080",
            "--publish",
            "127.0.0.1::9090",
        ]);
        args.extend(options);
        args.push(&self.images.proxy);
        args.extend([
            "--upstream",
            &self.upstream,
            "--admin-listen",
            "0.0.0.0:9090",
        ]);
        self.made.container(what, &args)
    }
}

/// Where the host reaches `container`'s `port`.
fn published(container: &str, port: u16) -> SocketAddr {
    let mapping = podman::ok(&["port", container, &port.to_string()]);
    mapping.lines().next().unwrap().parse().unwrap()
}

/// Clients of the proxy in `container` and of its admin listener, once its store answers
/// (`/readyz`).
async fn clients(container: &str) -> (TestClient, TestClient) {
    let client = TestClient::new(published(container, 8080));
    let admin = TestClient::new(published(container, 9090));
    let ready = async || {
        // A port whose container is gone may drop what is sent to it rather than refuse it.
        let probe = admin.send_raw("GET", "/readyz", &[], "");
        let answer = tokio::time::timeout(Duration::from_secs(2), probe).await;
        answer.is_ok_and(|answer| answer.is_ok_and(|status| status == 200))
    };
    until(container, "ready", ready).await;
    (client, admin)
}

/// Waits for `check` to hold of `container`; fails with the container's log when it does not
/// within [`STARTING`].
async fn until(container: &str, what: &str, check: impl AsyncFnMut() -> bool) {
    let waiting = poll::until(STARTING * 2, format!("{container} {what}"), check);
    if tokio::time::timeout(STARTING, waiting).await.is_err() {
        let logs = podman::run(&["logs", container]);
        panic!(
            "{container} not {what} within {STARTING:?}; its log:\n{}{}",
            String::from_utf8_lossy(&logs.stdout),
            String::from_utf8_lossy(&logs.stderr)
        );
    }
}

/// Waits for the demo upstream in `container` to listen: it says so once it does.
async fn until_listening(container: &str) {
    let listening = async || {
        let logs = podman::run(&["logs", container]);
        String::from_utf8_lossy(&logs.stdout).contains("answering on")
    };
    until(container, "listening", listening).await;
}

/// The upstream's count of runs in a demo upstream's answer.
fn run(answer: &Answer) -> u64 {
    answer.json()["run"]
        .as_u64()
        .expect("the demo upstream numbers its runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_survives_a_restart_and_a_new_container_on_the_same_volume() {
    let Some(images) = podman::images() else {
        return;
    };
    let mut scene = Scene::new(images, "replay").await;
    let volume = scene.made.volume("replay-data");
    let mount = format!("{volume}:/data");
    let first_proxy = scene.proxy("replay-a", &["--volume", &mount]);
    let (client, _) = clients(&first_proxy).await;

    let first = client.post("/v1/charges", "container-1", BODY).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    let replay = client.post("/v1/charges", "container-1", BODY).await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(replay.body, first.body);

    podman::ok(&["restart", &first_proxy]);
    let (client, _) = clients(&first_proxy).await;
    let after_restart = client.post("/v1/charges", "container-1", BODY).await;
    assert!(after_restart.replayed(), "{after_restart:?}");
    assert_eq!(after_restart.body, first.body);

    podman::ok(&["rm", "--force", &first_proxy]);
    let second_proxy = scene.proxy("replay-b", &["--volume", &mount]);
    let (client, _) = clients(&second_proxy).await;
    let new_container = client.post("/v1/charges", "container-1", BODY).await;
    assert!(
        new_container.replayed(),
        "the volume kept it: {new_container:?}"
    );
    assert_eq!(new_container.body, first.body);
    let next = client.post("/v1/charges", "container-2", BODY).await;
    assert_eq!(run(&next), run(&first) + 1, "container-1 ran once upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_runs_unprivileged_is_healthy_and_drains_on_stop() {
    let Some(images) = podman::images() else {
        return;
    };
    let mut scene = Scene::new(images, "stop").await;
    let container = scene.proxy("stop", &[]);
    let (client, admin) = clients(&container).await;

    let pid = podman::ok(&["inspect", "--format", "{{.State.Pid}}", &container]);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["10001"; 4],
        "real, effective, saved and filesystem uid"
    );
    let health = podman::run(&["healthcheck", "run", &container]);
    assert!(health.status.success(), "{health:?}");

    let slow = [("idempotency-key", "draining-1"), ("x-delay-ms", "3000")];
    let in_flight = {
        let client = client.clone();
        tokio::spawn(async move { client.send("POST", "/v1/charges", &slow, BODY).await })
    };
    let running = async || {
        let record = admin.send("GET", "/keys/default/draining-1", &[], "").await;
        record.status == 200 && record.json()["state"] == "in_flight"
    };
    until(&container, "running draining-1", running).await;
    podman::ok(&["stop", "--time", "60", &container]);
    let answer = in_flight.await.unwrap();
    assert_eq!(answer.status, 201, "answered while draining: {answer:?}");
    assert!(run(&answer) > 0, "the upstream's answer: {answer:?}");
    let exit = podman::ok(&["inspect", "--format", "{{.State.ExitCode}}", &container]);
    assert_eq!(exit, "0", "the proxy exits 0 after draining");
}

/// docker-compose.yml, brought up with podman-compose under a project name of the test's own
/// and brought down (with its volumes) when dropped.
struct Compose {
    project: String,
    file: std::path::PathBuf,
}

impl Compose {
    /// Brings docker-compose.yml up as [`compose_file`] rewrites it.
    fn up(images: &Images) -> Self {
        let project = podman::name("compose");
        let file = std::env::temp_dir().join(format!("{project}.yml"));
        std::fs::write(&file, compose_file(images)).unwrap();
        let compose = Self { project, file };
        let output = compose.run(&["up", "--detach"]);
        assert!(output.status.success(), "podman-compose up: {output:?}");
        compose
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        podman::command("podman-compose")
            .args(["--project-name", &self.project, "--file"])
            .arg(&self.file)
            .args(args)
            .output()
            .expect("podman-compose runs")
    }

    /// The container of `service`.
    fn container(&self, service: &str) -> String {
        let project = format!("label=io.podman.compose.project={}", self.project);
        let service = format!("label=com.docker.compose.service={service}");
        let filters = ["--filter", &project, "--filter", &service];
        podman::ok(&[&["ps", "--format", "{{.Names}}"], &filters[..]].concat())
    }
}

impl Drop for Compose {
    /// Removes what the project made, by its label: `podman-compose down` would leave the
    /// proxies' anonymous volumes and the project's network.
    fn drop(&mut self) {
        let label = format!("label=io.podman.compose.project={}", self.project);
        for (list, remove) in [
            (
                &["ps", "--all"][..],
                &["rm", "--force", "--time", "0", "--volumes"][..],
            ),
            (&["volume", "ls"][..], &["volume", "rm", "--force"][..]),
            (&["network", "ls"][..], &["network", "rm", "--force"][..]),
        ] {
            let listed = podman::run(&[list, &["--quiet", "--filter", &label]].concat());
            for id in String::from_utf8_lossy(&listed.stdout).split_whitespace() {
                let _ = podman::run(&[remove, &[id]].concat());
            }
        }
        let _ = std::fs::remove_file(&self.file);
    }
}

/// docker-compose.yml with the services, commands and volumes it has, but this tree's images
/// where it would build them, and its ports published on loopback at ports podman picks (the
/// machine's 8080 may be taken).
fn compose_file(images: &Images) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docker-compose.yml");
    let mut compose: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let services = compose["services"].as_mapping_mut().expect("services");
    for (name, service) in services.iter_mut() {
        let service = service.as_mapping_mut().unwrap();
        if service.remove("build").is_some() {
            let image = match service["image"].as_str() {
                Some("idempotency-proxy") => &images.proxy,
                Some("idempotency-proxy-demo-upstream") => &images.demo_upstream,
                other => panic!("{name:?} builds an image named {other:?}"),
            };
            service.insert("image".into(), image.as_str().into());
        }
        for port in service
            .get_mut("ports")
            .into_iter()
            .flat_map(|p| p.as_sequence_mut().unwrap())
        {
            let inside = port
                .as_str()
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .to_owned();
            *port = format!("127.0.0.1::{inside}").into();
        }
    }
    // Written as JSON, which is YAML too, with every string quoted: podman-compose reads YAML
    // 1.1, where a bare `yes` would be a boolean.
    serde_json::to_string_pretty(&compose).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_file_comes_up_and_its_replicas_share_one_redis() {
    let Some(images) = podman::images() else {
        return;
    };
    if !podman::compose_available() {
        return;
    }
    let compose = Compose::up(images);
    until_listening(&compose.container("upstream")).await;
    let (a, _) = clients(&compose.container("proxy-a")).await;
    let (b, _) = clients(&compose.container("proxy-b")).await;

    let first = a.post("/v1/charges", "compose-1", BODY).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    let retry = b.post("/v1/charges", "compose-1", BODY).await;
    assert!(
        retry.replayed(),
        "replica b replays what a stored: {retry:?}"
    );
    assert_eq!(retry.body, first.body);
}
