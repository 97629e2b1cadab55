//! Serves an empty test API server until interrupted, writing its kubeconfig to the path
//! given (default `./test-apiserver.kubeconfig`), so `kubectl --kubeconfig …` can explore it.
#![allow(missing_docs)]

use karpenter_test_apiserver::ApiServer;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "test-apiserver.kubeconfig".to_owned());
    let server = ApiServer::start().await?;
    std::fs::write(&path, server.kubeconfig())?;
    println!(
        "serving on {}; kubeconfig in {path}; Ctrl-C stops",
        server.url()
    );
    tokio::signal::ctrl_c().await?;
    server.stop().await;
    Ok(())
}
