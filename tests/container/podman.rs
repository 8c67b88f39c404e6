//! podman for the container tests: the images, built once per test binary from the Dockerfile
//! around the binaries this test build already has (not a release build of their own: the
//! image's stages after the binaries are what is tested, and the release profile's fat LTO
//! would double the suite's compile time); podman and podman-compose run with the repository's
//! settings (`tests/container/containers.conf`); and what a test makes (containers, networks,
//! volumes), removed when it is done with them.
//!
//! Without podman, or without the base images (`.ci/container-images` makes them), the tests
//! say SKIPPED and pass, unless `REQUIRE_PODMAN=1` (as `.ci/test` sets it).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The images the Dockerfile's stages start from; podman has them, or the tests skip.
const BASE_IMAGES: [&str; 2] = ["debian:bookworm-slim", "redis:7"];

/// The images of this tree, as the tests tag them.
pub(crate) struct Images {
    /// The proxy: the Dockerfile's default target.
    pub(crate) proxy: String,
    /// docker-compose.yml's demo service: the target `demo-upstream`.
    pub(crate) demo_upstream: String,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `program` (podman or podman-compose) with the repository's podman settings, unless
/// `CONTAINERS_CONF` names others.
pub(crate) fn command(program: &str) -> Command {
    let mut command = Command::new(program);
    if std::env::var_os("CONTAINERS_CONF").is_none() {
        command.env(
            "CONTAINERS_CONF",
            repo().join("tests/container/containers.conf"),
        );
    }
    command
}

/// Runs podman with `args`.
pub(crate) fn run(args: &[&str]) -> Output {
    command("podman").args(args).output().expect("podman runs")
}

/// Runs podman with `args`, which must succeed; its output, trimmed.
pub(crate) fn ok(args: &[&str]) -> String {
    let output = run(args);
    assert!(
        output.status.success(),
        "podman {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The images, built on the first call; `None` (after saying SKIPPED) where podman or the base
/// images are missing and `REQUIRE_PODMAN=1` is not set.
pub(crate) fn images() -> Option<&'static Images> {
    static IMAGES: OnceLock<Option<Images>> = OnceLock::new();
    IMAGES
        .get_or_init(|| missing().map_or_else(|| Some(build_images()), |why| skip(&why)))
        .as_ref()
}

/// Whether podman-compose is here too; says SKIPPED when not, as [`images`] does.
pub(crate) fn compose_available() -> bool {
    let found = Command::new("podman-compose")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !found {
        skip::<()>("podman-compose cannot be run");
    }
    found
}

/// Why the images cannot be built here, if they cannot.
fn missing() -> Option<String> {
    let podman = Command::new("podman").arg("--version").output();
    if !podman.is_ok_and(|output| output.status.success()) {
        return Some("podman cannot be run".to_owned());
    }
    BASE_IMAGES
        .into_iter()
        .find(|image| !run(&["image", "exists", image]).status.success())
        .map(|image| format!("podman has no image {image} (.ci/container-images makes it)"))
}

fn skip<T>(why: &str) -> Option<T> {
    assert!(
        std::env::var("REQUIRE_PODMAN").as_deref() != Ok("1"),
        "REQUIRE_PODMAN=1 but {why}"
    );
    say(&format!(
        "\n*** SKIPPED: {why}; the image was not built and run (.ci/setup installs podman) ***\n"
    ));
    None
}

/// Writes `line` to the process's standard error, where a passing test's `eprintln!` would be
/// captured and never shown.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The repositories the tests tag their images in; each test process tags its own
/// (`test-PID`), so that two checkouts tested at once never run each other's binaries.
const REPOSITORIES: [&str; 2] = [
    "localhost/idempotency-proxy",
    "localhost/idempotency-proxy-demo-upstream",
];

fn build_images() -> Images {
    remove_images_of_gone_processes();
    let context =
        std::env::temp_dir().join(format!("idempotency-proxy-image-{}", std::process::id()));
    std::fs::create_dir_all(&context).unwrap();
    let proxy = PathBuf::from(env!("CARGO_BIN_EXE_idempotency-proxy"));
    std::fs::copy(proxy, context.join("idempotency-proxy")).unwrap();
    std::fs::copy(demo_upstream_binary(), context.join("upstream")).unwrap();
    let [proxy, demo_upstream] =
        REPOSITORIES.map(|repository| format!("{repository}:{}", test_tag()));
    let images = Images {
        proxy,
        demo_upstream,
    };
    let mut stages = build(&context, &images.proxy, None);
    stages.extend(build(
        &context,
        &images.demo_upstream,
        Some("demo-upstream"),
    ));
    std::fs::remove_dir_all(&context).unwrap();
    // The stages that only carried the binaries are nobody's parent, so removing a test's
    // images later would leave them behind; the others are in use and stay.
    for stage in stages {
        let _ = run(&["rmi", &stage]);
    }
    let bytes: u64 = ok(&["image", "inspect", "--format", "{{.Size}}", &images.proxy])
        .parse()
        .unwrap();
    say(&format!("the proxy's image: {:.1} MB", bytes as f64 / 1e6));
    images
}

fn test_tag() -> String {
    format!("test-{}", std::process::id())
}

/// Removes the images (and any container left on them) that earlier test processes tagged and
/// could not remove, as they ended after their last test: those whose process is gone.
fn remove_images_of_gone_processes() {
    let listed = ok(&["images", "--format", "{{.Repository}}:{{.Tag}}"]);
    for image in listed.lines() {
        let Some((repository, tag)) = image.rsplit_once(':') else {
            continue;
        };
        let pid = tag
            .strip_prefix("test-")
            .and_then(|pid| pid.parse::<u32>().ok());
        let gone = pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
        if REPOSITORIES.contains(&repository) && gone {
            let _ = run(&["rmi", "--force", image]);
        }
    }
}

/// The Dockerfile built around the binaries in `context` as `tag`: no registry is asked
/// (`--pull=never`), and the image keeps its HEALTHCHECK (`--format docker`). The images of
/// the stages before the last, as podman printed them.
fn build(context: &Path, tag: &str, target: Option<&str>) -> Vec<String> {
    let dockerfile = repo().join("Dockerfile");
    let mut args = vec!["build", "--pull=never", "--format", "docker"];
    args.extend(["--build-arg", "BINARIES=prebuilt", "--tag", tag]);
    if let Some(target) = target {
        args.extend(["--target", target]);
    }
    args.extend([
        "--file",
        dockerfile.to_str().unwrap(),
        context.to_str().unwrap(),
    ]);
    let printed = ok(&args);
    let last = ok(&["image", "inspect", "--format", "{{.Id}}", tag]);
    printed
        .lines()
        .filter_map(|line| line.strip_prefix("--> "))
        .map(str::trim)
        .filter(|id| id.chars().all(|c| c.is_ascii_hexdigit()) && !last.starts_with(id))
        .map(str::to_owned)
        .collect()
}

/// The demo upstream (`--example upstream`) of this test build's profile, built if `cargo test`
/// has not built it already (`cargo test --test container` builds no example); its path.
fn demo_upstream_binary() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
    let mut build = Command::new(cargo);
    // The variables cargo set for this test, which a shell's cargo does not have: build scripts
    // that watch one (ring's watch CARGO_PKG_NAME) would run again, and the build after this one
    // would compile their crates a second time.
    for (variable, _) in std::env::vars_os() {
        let variable = variable.to_string_lossy();
        let per_package = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
        ]
        .iter()
        .any(|prefix| variable.starts_with(prefix));
        let per_run = [
            "CARGO",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "OUT_DIR",
        ];
        if per_package || per_run.contains(&&*variable) {
            build.env_remove(&*variable);
        }
    }
    let output = build
        .args(["build", "--message-format=json", "--example", "upstream"])
        .current_dir(repo())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo build --example upstream failed"
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["target"]["name"] == "upstream")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the example's executable")
}

/// A name for something a test makes, unique to this process.
pub(crate) fn name(what: &str) -> String {
    format!("idempotency-test-{what}-{}", std::process::id())
}

/// What a test made with podman, removed when dropped: containers (with their anonymous
/// volumes) first, then networks and volumes.
#[derive(Default)]
pub(crate) struct Made {
    containers: Vec<String>,
    networks: Vec<String>,
    volumes: Vec<String>,
}

impl Made {
    /// A new network, named after `what`.
    pub(crate) fn network(&mut self, what: &str) -> String {
        let name = name(what);
        ok(&["network", "create", &name]);
        self.networks.push(name.clone());
        name
    }

    /// A new volume, named after `what`.
    pub(crate) fn volume(&mut self, what: &str) -> String {
        let name = name(what);
        ok(&["volume", "create", &name]);
        self.volumes.push(name.clone());
        name
    }

    /// Starts a container (`podman run --detach`) named after `what`, with `args` (options,
    /// the image, then its arguments); its name.
    pub(crate) fn container(&mut self, what: &str, args: &[&str]) -> String {
        let name = name(what);
        self.containers.push(name.clone());
        let mut run = vec!["run", "--detach", "--pull=never", "--name", &name];
        run.extend(args);
        ok(&run);
        name
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for container in &self.containers {
            let _ = run(&["rm", "--force", "--time", "0", "--volumes", container]);
        }
        for network in &self.networks {
            let _ = run(&["network", "rm", "--force", network]);
        }
        for volume in &self.volumes {
            let _ = run(&["volume", "rm", "--force", volume]);
        }
    }
}
