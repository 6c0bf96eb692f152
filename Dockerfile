# The kubosh image: the `kubosh` binary (`kubosh controller`, and `kubosh cpi` and `kubosh
# agent` for the local cloud) on a slim Debian with Ruby, which the job template renderer
# runs (BOSH templates are ERB: `ruby` renders them in batches). Not distroless for that
# reason, and because the local cloud's VMs run job scripts with a shell.
#
#   docker build -t kubosh:0.1.0 .
#
# The tests build it as it is with buildah (tools/images.sh, which makes the two base images
# here from Debian packages and this machine's Rust toolchain, since none can be pulled).
#
# A real CPI (AWS, vSphere, OpenStack...) goes into an image derived from this one:
#   FROM kubosh:0.1.0
#   COPY --from=... /var/vcap/packages/aws_cpi /var/vcap/packages/aws_cpi
# with the chart's `cpi.command` naming its executable.

ARG RUST_VERSION=1.95
ARG DEBIAN=trixie

FROM rust:${RUST_VERSION}-slim-${DEBIAN} AS build
# `dev` builds in a third of the time (the test command's image: tools/images.sh).
ARG CARGO_PROFILE=release
WORKDIR /src
COPY . .
# COPY keeps the files' times, so a source older than the cached target's last build would
# look built already: the workspace's own sources are made newer than any build first.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    find src crates -type f -exec touch {} + \
    && cargo build --profile "${CARGO_PROFILE}" --locked --bin kubosh \
    && out=$([ "${CARGO_PROFILE}" = dev ] && echo debug || echo "${CARGO_PROFILE}") \
    && install -m 0755 "target/${out}/kubosh" /usr/local/bin/kubosh

FROM debian:${DEBIAN}-slim
# gcc, libc6-dev and make: the local cloud's VMs are processes in this image, and compile
# the releases' packages as a stemcell's VM would (BOSH stemcells carry a compiler too).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ruby ca-certificates gcc libc6-dev make \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/kubosh /usr/local/bin/kubosh
# The local cloud's VMs each mount their own directory here, in a user namespace of their
# own (only root can create the mount point).
RUN mkdir -p /var/vcap
# The chart's pod runs as this user with a read-only root file system: everything it writes
# is under /var/lib/kubosh and /tmp (volumes).
USER 65532:65532
ENV HOME=/tmp
ENTRYPOINT ["/usr/local/bin/kubosh"]
CMD ["controller", "--help"]
