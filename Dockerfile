# The kubosh image: the `kubosh` binary (`kubosh controller`, and `kubosh cpi` and `kubosh
# agent` for the local cloud) on a slim Debian with Ruby, which the job template renderer
# runs (BOSH templates are ERB: `ruby` renders them in batches). Not distroless for that
# reason, and because the local cloud's VMs run job scripts with a shell.
#
#   docker build -t kubosh:0.1.0 .
#
# A real CPI (AWS, vSphere, OpenStack...) goes into an image derived from this one:
#   FROM kubosh:0.1.0
#   COPY --from=... /var/vcap/packages/aws_cpi /var/vcap/packages/aws_cpi
# with the chart's `cpi.command` naming its executable.

ARG RUST_VERSION=1.95
ARG DEBIAN=trixie

FROM rust:${RUST_VERSION}-slim-${DEBIAN} AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin kubosh \
    && install -m 0755 target/release/kubosh /usr/local/bin/kubosh

FROM debian:${DEBIAN}-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ruby ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/kubosh /usr/local/bin/kubosh
# The chart's pod runs as this user with a read-only root file system: everything it writes
# is under /var/lib/kubosh and /tmp (volumes).
USER 65532:65532
ENV HOME=/tmp
ENTRYPOINT ["/usr/local/bin/kubosh"]
CMD ["controller", "--help"]
