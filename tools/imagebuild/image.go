// Command imagebuild builds the delay-bridge container image as an OCI image layout
// without a Docker daemon and without pulling anything from a registry:
//
//	go run ./tools/imagebuild -out dist/oci -version 1.2.3
//
// The image has no base (the equivalent of FROM scratch, so there is no base digest to
// pin) and one layer: the static bridge binary at /bridge, built with the same go build
// command as the Dockerfile (CGO_ENABLED=0, -tags nodev: no `bridge dev` and none of
// its embedded Kafka and Redis servers in the image, -trimpath, -ldflags "-s -w -X
// main.version=..."), the build machine's CA bundle at /etc/ssl/certs/ca-certificates.crt,
// /etc/passwd and /etc/group naming the non-root user nonroot (65532), and /tmp. Its
// configuration mirrors the Dockerfile's final stage: USER 65532:65532, ENTRYPOINT
// ["/bridge"], CMD ["run", "-c", "/etc/delay-bridge/bridge.yaml"], port 8089 and the OCI
// labels source, version and revision. File times are fixed, so the same binary and CA
// bundle give the same image digest.
//
// The layout can be pushed with any OCI tool (crane push dist/oci REF, skopeo copy
// oci:dist/oci docker://REF) or loaded with `docker load` after conversion; the tests in
// this package unpack it and run its entrypoint as the declared user.
package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the Dockerfile's final stage declares; image_test.go checks the two agree.
const (
	// UID and GID of the image's user, nonroot as in distroless images. Numeric, so
	// Kubernetes' runAsNonRoot can verify it.
	UID = 65532
	GID = 65532
	// User is the image's USER.
	User = "65532:65532"
	// AdminPort is EXPOSEd: the admin API, /metrics, /healthz, /readyz.
	AdminPort = "8089/tcp"
	// DefaultSource is org.opencontainers.image.source.
	DefaultSource = "https://github.com/delaybridge/delay-bridge"
	// BinaryPath is where the bridge binary lives in the image.
	BinaryPath = "/bridge"
	// CACertsPath is the CA bundle in the image (where Go's crypto/x509 looks first).
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
)

var (
	Entrypoint = []string{BinaryPath}
	Cmd        = []string{"run", "-c", "/etc/delay-bridge/bridge.yaml"}
	// Env: Docker's default PATH (nothing else is in the image) and the CA bundle.
	Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SSL_CERT_FILE=" + CACertsPath,
	}
	// Passwd and Group are the image's /etc/passwd and /etc/group.
	Passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	Group  = "root:x:0:\nnonroot:x:65532:\n"
)

// Options say what to build.
type Options struct {
	Repo     string // repository root (holds go.mod and cmd/bridge)
	Out      string // OCI image layout directory to create (must not exist or be empty)
	Version  string // main.version and org.opencontainers.image.version
	Revision string // org.opencontainers.image.revision ("" = git rev-parse HEAD in Repo)
	Source   string // org.opencontainers.image.source ("" = DefaultSource)
	Arch     string // GOARCH ("" = this machine's)
	CACerts  string // CA bundle to copy ("" = /etc/ssl/certs/ca-certificates.crt)
	Tag      string // org.opencontainers.image.ref.name in index.json ("" = Version)
	// Created is the image's creation time and every file's mtime (zero = the Unix epoch,
	// for a reproducible digest).
	Created time.Time
	// GoFlags are extra go build flags placed before the package (e.g. -p=1).
	GoFlags []string
}

// Result describes a built image.
type Result struct {
	Digest v1.Hash // of the image manifest
	Binary string  // the built binary, in a temporary directory the caller removes
	Config v1.ConfigFile
}

// GoBuildArgs is the Dockerfile's go build command for version and output file out
// (run with CGO_ENABLED=0 GOOS=linux GOARCH=<arch>).
func GoBuildArgs(version, out string) []string {
	return []string{"build", "-tags", "nodev", "-trimpath", "-ldflags", "-s -w -X main.version=" + version, "-o", out, "./cmd/bridge"}
}

// Build compiles the bridge and writes the image to o.Out.
func Build(o Options) (*Result, error) {
	if o.Repo == "" || o.Out == "" || o.Version == "" {
		return nil, fmt.Errorf("imagebuild: Repo, Out and Version are required")
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.Source == "" {
		o.Source = DefaultSource
	}
	if o.CACerts == "" {
		o.CACerts = "/etc/ssl/certs/ca-certificates.crt"
	}
	if o.Tag == "" {
		o.Tag = o.Version
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0).UTC()
	}
	if o.Revision == "" {
		rev, err := exec.Command("git", "-C", o.Repo, "rev-parse", "HEAD").Output()
		if err != nil {
			return nil, fmt.Errorf("imagebuild: no -revision given and git rev-parse HEAD failed: %w", err)
		}
		o.Revision = strings.TrimSpace(string(rev))
	}
	certs, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: CA bundle (Debian package ca-certificates): %w", err)
	}

	tmp, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(tmp, "bridge")
	args := GoBuildArgs(o.Version, bin)
	args = append(args[:len(args)-1], append(o.GoFlags, args[len(args)-1])...)
	cmd := exec.Command(goBinary(), args...)
	cmd.Dir = o.Repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("imagebuild: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}

	layerTar, err := rootfsTar(o.Created, binary, certs)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	img, cfg, err := assemble(o, layerTar)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := writeLayout(o.Out, img, o.Tag); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return &Result{Digest: digest, Binary: bin, Config: *cfg}, nil
}

func goBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// rootfsTar is the image's only layer, uncompressed.
func rootfsTar(mtime time.Time, binary, certs []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, uid, gid int, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)),
			Uid: uid, Gid: gid, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	steps := []func() error{
		func() error { return dir("etc", 0o755) },
		func() error { return file("etc/passwd", 0o644, 0, 0, []byte(Passwd)) },
		func() error { return file("etc/group", 0o644, 0, 0, []byte(Group)) },
		func() error { return dir("etc/ssl", 0o755) },
		func() error { return dir("etc/ssl/certs", 0o755) },
		func() error { return file(strings.TrimPrefix(CACertsPath, "/"), 0o644, 0, 0, certs) },
		func() error { return dir("etc/delay-bridge", 0o755) },
		func() error { return dir("tmp", 0o1777) },
		func() error { return file(strings.TrimPrefix(BinaryPath, "/"), 0o755, 0, 0, binary) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func assemble(o Options, layerTar []byte) (v1.Image, *v1.ConfigFile, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, nil, fmt.Errorf("imagebuild: layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: o.Created}, CreatedBy: "tools/imagebuild: /bridge, CA certificates, passwd, group, /tmp",
	}})
	if err != nil {
		return nil, nil, fmt.Errorf("imagebuild: append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = o.Arch
	cf.OS = "linux"
	cf.Created = v1.Time{Time: o.Created}
	cf.Config = v1.Config{
		User:         User,
		Entrypoint:   Entrypoint,
		Cmd:          Cmd,
		Env:          Env,
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{AdminPort: {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "delay-bridge",
			"org.opencontainers.image.description": "Arbitrary per-message delays for Kafka and RabbitMQ through Redis",
			"org.opencontainers.image.source":      o.Source,
			"org.opencontainers.image.version":     o.Version,
			"org.opencontainers.image.revision":    o.Revision,
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, nil, fmt.Errorf("imagebuild: config: %w", err)
	}
	return img, cf, nil
}

func writeLayout(dir string, img v1.Image, tag string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("imagebuild: %s exists and is not empty", dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("imagebuild: layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return fmt.Errorf("imagebuild: layout: %w", err)
	}
	return nil
}
