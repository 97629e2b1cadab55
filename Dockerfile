# syntax=docker/dockerfile:1
# The controller image: `docker build -t REPOSITORY:TAG .` (deploy/README.md, "The image").
# The test command builds the same contents offline (scripts/image.sh) and runs them with runc.

# The toolchain rust-toolchain.toml pins.
ARG RUST_VERSION=1.95.0

FROM rust:${RUST_VERSION}-bookworm AS build
# The commit JSON log lines carry (`commit`): --build-arg REVISION=$(git rev-parse HEAD).
ARG REVISION=unknown
WORKDIR /src
COPY . .
# Registry and target directory are BuildKit caches: a rebuild recompiles only what changed.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols KARPENTER_COMMIT=${REVISION} \
    cargo build --release --locked --bin karpenter \
    && cp target/release/karpenter /karpenter

# glibc, libgcc, CA certificates, the nonroot user (65532); no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=""
LABEL org.opencontainers.image.title="karpenter-rs" \
      org.opencontainers.image.description="Kubernetes node autoscaler (Karpenter's APIs, in Rust)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /karpenter /karpenter
USER 65532:65532
ENTRYPOINT ["/karpenter", "controller"]
