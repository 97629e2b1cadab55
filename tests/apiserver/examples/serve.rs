//! Serves an empty test API server until interrupted,
//! writing its kubeconfig to the path given (default `./test-apiserver.kubeconfig`), so
//! `kubectl --kubeconfig …` can explore it and `karpenter bench cluster --kubeconfig …` can
//! run on it. `--controllers` also runs the kube-scheduler and Deployment stand-ins.
#![allow(missing_docs)]

use karpenter_test_apiserver::{ApiServer, Controllers, Options};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::io::Result<()> {
    let mut path = "test-apiserver.kubeconfig".to_owned();
    let mut options = Options::default();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--controllers" => {
                options.controllers = Controllers {
                    scheduler: true,
                    workloads: true,
                }
            }
            other if other.starts_with('-') => {
                eprintln!("serve: unknown flag {other} (known: --controllers)");
                std::process::exit(2);
            }
            other => path = other.to_owned(),
        }
    }
    let server = ApiServer::start_with(options).await?;
    std::fs::write(&path, server.kubeconfig())?;
    println!(
        "serving on {}; kubeconfig in {path}; Ctrl-C stops",
        server.url()
    );
    tokio::signal::ctrl_c().await?;
    server.stop().await;
    Ok(())
}
