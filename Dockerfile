# syntax=docker/dockerfile:1
#
# delay-bridge image: a static binary on an empty base (FROM scratch: no base image, so no
# base digest to pin), with CA certificates, /etc/passwd naming the non-root user nonroot
# (65532) and /tmp. No shell: the compose healthcheck and `helm test` use `/bridge ctl ready`.
#
#   docker build -t delay-bridge:1.2.3 --build-arg VERSION=1.2.3 --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run --rm -v $PWD/bridge.yaml:/etc/delay-bridge/bridge.yaml:ro delay-bridge:1.2.3
#
# CI builds the same image without a Docker daemon: `go run ./tools/imagebuild` writes
# an OCI image layout with the same go build command, files, user, entrypoint, command,
# port and labels, and its tests unpack it and run the entrypoint as the image's user
# (tools/imagebuild/image_test.go checks this file against it).
#
# Needs BuildKit (the default builder since Docker 23) for the cache mounts.
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ... (the Go
# compiler cross-compiles on the build platform; no emulation).

ARG GO_VERSION=1.26.8

# The build stage is not part of the image. Pin it by digest in your own pipeline
# (golang:1.26.8@sha256:...) if you need a reproducible builder.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first, so source edits do not invalidate the module download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -tags nodev -trimpath -ldflags "-s -w -X main.version=$VERSION" -o /out/bridge ./cmd/bridge
# The runtime files (the golang image is Debian with ca-certificates).
RUN mkdir -p /out/rootfs/etc/ssl/certs /out/rootfs/etc/delay-bridge /out/rootfs/tmp && \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /out/rootfs/etc/passwd && \
    printf 'root:x:0:\nnonroot:x:65532:\n' > /out/rootfs/etc/group && \
    cp /etc/ssl/certs/ca-certificates.crt /out/rootfs/etc/ssl/certs/ca-certificates.crt && \
    chmod 1777 /out/rootfs/tmp

FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="delay-bridge" \
      org.opencontainers.image.description="Arbitrary per-message delays for Kafka and RabbitMQ through Redis" \
      org.opencontainers.image.source="https://github.com/delaybridge/delay-bridge" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION"
COPY --from=build /out/rootfs/ /
COPY --from=build /out/bridge /bridge
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
# Admin API, /metrics, /healthz, /readyz (admin.listen must be 0.0.0.0:8089 to reach it
# from outside the container).
EXPOSE 8089
ENTRYPOINT ["/bridge"]
CMD ["run", "-c", "/etc/delay-bridge/bridge.yaml"]
