//! The controller image, built offline (`scripts/image.sh`, the Dockerfile's runtime stage
//! without a registry) into an OCI layout and run with a real OCI runtime (Debian's `runc`,
//! which `scripts/test.sh` installs): its configuration is the Dockerfile's, `--help` works,
//! and the controller it starts against the test API server answers its health probes and
//! `/metrics` as UID 65532 on a read-only root filesystem, as the chart runs it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use karpenter_test_apiserver::ApiServer;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tool(name: &str) -> String {
    let found = Command::new(name).arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "{name} is needed to build and run the image: run ./scripts/test.sh (which installs it \
         with `apt-get install runc umoci`)"
    );
    name.to_owned()
}

fn succeeded(output: Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The image, built into `dir/layout` with the test's binary; its reference.
fn build_image(dir: &Path) -> String {
    tool("umoci");
    let layout = dir.join("layout");
    let tag = env!("CARGO_PKG_VERSION");
    let output = Command::new(repo().join("scripts/image.sh"))
        .arg(env!("CARGO_BIN_EXE_karpenter"))
        .arg(&layout)
        .arg(tag)
        .output()
        .unwrap();
    succeeded(output, "scripts/image.sh");
    format!("{}:{tag}", layout.display())
}

/// The image's configuration blob (index → manifest → config).
fn image_config(layout: &Path) -> serde_json::Value {
    let blob = |digest: &str| -> serde_json::Value {
        let hex = digest.strip_prefix("sha256:").unwrap();
        let text = std::fs::read_to_string(layout.join("blobs/sha256").join(hex)).unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(layout.join("index.json")).unwrap()).unwrap();
    let manifest = blob(index["manifests"][0]["digest"].as_str().unwrap());
    blob(manifest["config"]["digest"].as_str().unwrap())
}

/// A runc bundle of `image` in `dir/NAME`, run as the chart runs the pod: read-only root,
/// the image's user, the journal on a writable volume, `args` after the entrypoint, and the
/// host's network (the test API server listens on the host's 127.0.0.1).
fn bundle(
    image: &str,
    dir: &Path,
    name: &str,
    args: &[&str],
    mounts: &[(PathBuf, &str)],
) -> PathBuf {
    let path = dir.join(name);
    let output = Command::new("umoci")
        .args(["unpack", "--image", image])
        .arg(&path)
        .output()
        .unwrap();
    succeeded(output, "umoci unpack");
    let file = path.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    config["process"]["terminal"] = false.into();
    let argv = config["process"]["args"].as_array_mut().unwrap();
    argv.extend(args.iter().map(|a| serde_json::Value::from(*a)));
    config["root"]["readonly"] = true.into();
    config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["type"] != "network");
    let list = config["mounts"].as_array_mut().unwrap();
    list.push(serde_json::json!({
        "destination": "/var/lib/karpenter/journal", "type": "tmpfs", "source": "tmpfs",
        "options": ["nosuid", "nodev", "mode=1777", "size=64m"]
    }));
    for (source, destination) in mounts {
        list.push(serde_json::json!({
            "destination": destination, "type": "bind", "source": source,
            "options": ["rbind", "ro"]
        }));
    }
    std::fs::write(&file, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

/// A container started with `runc run`; killed and deleted when dropped.
struct Container {
    id: String,
    child: Child,
}

impl Container {
    fn start(bundle: &Path, id: &str, log: &Path) -> Container {
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new(tool("runc"))
            .args(["run", "--bundle"])
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Container {
            id: id.to_owned(),
            child,
        }
    }

    /// The container's first process, as the host sees it.
    fn pid(&self) -> u32 {
        let output = Command::new("runc")
            .args(["state", &self.id])
            .output()
            .unwrap();
        let state: serde_json::Value =
            serde_json::from_str(&succeeded(output, "runc state")).unwrap();
        u32::try_from(state["pid"].as_u64().unwrap()).unwrap()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .args(["kill", &self.id, "KILL"])
            .output();
        let _ = self.child.wait();
        let _ = Command::new("runc")
            .args(["delete", "--force", &self.id])
            .output();
    }
}

/// `GET path` on 127.0.0.1:`port`: status and body.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

#[test]
fn the_image_has_the_dockerfiles_configuration_and_its_help_runs() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_image(dir.path());
    let config = image_config(&dir.path().join("layout"));
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    // The offline image is the Dockerfile's: same user, entrypoint and licence.
    assert_eq!(config["config"]["User"], "65532:65532");
    assert!(dockerfile.contains("\nUSER 65532:65532\n"), "{dockerfile}");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/karpenter", "controller"])
    );
    assert!(dockerfile.contains("\nENTRYPOINT [\"/karpenter\", \"controller\"]\n"));
    let labels = &config["config"]["Labels"];
    for (label, value) in [
        ("org.opencontainers.image.licenses", "Apache-2.0"),
        (
            "org.opencontainers.image.version",
            env!("CARGO_PKG_VERSION"),
        ),
        ("org.opencontainers.image.title", "karpenter-rs"),
    ] {
        assert_eq!(labels[label], value, "{label}");
        assert!(dockerfile.contains(label), "the Dockerfile sets {label}");
    }
    assert!(labels["org.opencontainers.image.revision"].is_string());
    assert!(
        dockerfile.contains("ARG RUST_VERSION=1.95.0"),
        "the pinned toolchain"
    );
    let chart =
        std::fs::read_to_string(repo().join("deploy/charts/karpenter-rs/values.yaml")).unwrap();
    assert!(
        chart.contains(&format!("tag: \"{}\"", env!("CARGO_PKG_VERSION"))),
        "the chart's image tag is the version the image is built as"
    );

    let help = bundle(&image, dir.path(), "help", &["--help"], &[]);
    let id = format!("karpenter-rs-help-{}", std::process::id());
    let log = dir.path().join("help.log");
    let mut container = Container::start(&help, &id, &log);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = container.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "--help did not finish");
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{text}");
    assert!(
        text.contains("Run the autoscaler against a Kubernetes cluster"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_runs_from_the_image_as_65532_on_a_read_only_root() {
    let dir = tempfile::tempdir().unwrap();
    let image = build_image(dir.path());
    let server = ApiServer::start().await.unwrap();
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(client);
    for crd in karpenter_core::api::crds::all().unwrap() {
        crds.create(&Default::default(), &crd).await.unwrap();
    }
    let config_dir = dir.path().join("kubeconfig");
    std::fs::create_dir(&config_dir).unwrap();
    std::fs::write(
        config_dir.join("config"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n\
             contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n\
             current-context: test\nusers:\n- name: test\n  user: {{}}\n",
            server.url()
        ),
    )
    .unwrap();
    let (metrics, probes) = (
        karpenter_aws::testing::free_port(),
        karpenter_aws::testing::free_port(),
    );
    let (metrics_port, probe_port) = (metrics.to_string(), probes.to_string());
    let args = [
        "--kubeconfig",
        "/etc/karpenter/config",
        "--cloud",
        "sim",
        "--disable-leader-election",
        "--journal",
        "/var/lib/karpenter/journal",
        "--metrics-port",
        &metrics_port,
        "--health-probe-port",
        &probe_port,
    ];
    let controller = bundle(
        &image,
        dir.path(),
        "controller",
        &args,
        &[(config_dir, "/etc/karpenter")],
    );
    let id = format!("karpenter-rs-controller-{}", std::process::id());
    let log = dir.path().join("controller.log");
    let mut container = Container::start(&controller, &id, &log);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ready = get(probes, "/readyz").is_some_and(|(status, _)| status == 200);
        if ready {
            break;
        }
        assert!(
            container.child.try_wait().unwrap().is_none(),
            "the controller exited: {}",
            logs()
        );
        assert!(Instant::now() < deadline, "never ready: {}", logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(get(probes, "/healthz").map(|(s, _)| s), Some(200));
    let (status, body) = get(metrics, "/metrics").expect("/metrics answers");
    assert_eq!(status, 200);
    assert!(body.contains("karpenter_"), "{body}");

    // As the image's user, on a read-only root.
    let pid = container.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["65532"; 4],
        "{uid}"
    );
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .unwrap();
    let options = root.split_whitespace().nth(5).unwrap();
    assert!(options.split(',').any(|o| o == "ro"), "{root}");
    drop(container);
    server.stop().await;
}
