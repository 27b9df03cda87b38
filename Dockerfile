# syntax=docker/dockerfile:1
#
# delay-bridge image: a static binary on distroless (CA certificates, tzdata, user
# nonroot 65532, no shell).
#
#   docker build -t delay-bridge:1.2.3 --build-arg VERSION=1.2.3 .
#   docker run --rm -v $PWD/bridge.yaml:/etc/delay-bridge/bridge.yaml:ro delay-bridge:1.2.3
#
# Needs BuildKit (the default builder since Docker 23) for the cache mounts.
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ... (the Go
# compiler cross-compiles on the build platform; no emulation).

ARG GO_VERSION=1.26.8

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
    go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o /out/bridge ./cmd/bridge

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="delay-bridge" \
      org.opencontainers.image.description="Arbitrary per-message delays for Kafka and RabbitMQ through Redis" \
      org.opencontainers.image.source="https://github.com/delaybridge/delay-bridge" \
      org.opencontainers.image.version="$VERSION"
COPY --from=build /out/bridge /bridge
USER 65532:65532
# Admin API, /metrics, /healthz, /readyz (admin.listen must be 0.0.0.0:8089 to reach it
# from outside the container).
EXPOSE 8089
ENTRYPOINT ["/bridge"]
CMD ["run", "-c", "/etc/delay-bridge/bridge.yaml"]
