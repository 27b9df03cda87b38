package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/testkit"
)

const (
	testVersion  = "9.8.7-imagetest"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

var repoRoot = func() string {
	p, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return p
}()

// built is the image every test here inspects, built once.
var built = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "imagebuild-test-")
	if err != nil {
		return "", err
	}
	res, err := Build(Options{Repo: repoRoot, Out: filepath.Join(dir, "oci"), Version: testVersion,
		Revision: testRevision, GoFlags: []string{"-p=1"}})
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	os.RemoveAll(filepath.Dir(res.Binary))
	return filepath.Join(dir, "oci"), nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := built(); err == nil {
		os.RemoveAll(filepath.Dir(dir))
	}
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "goroutines outlived the tests:", err)
		code = 1
	}
	os.Exit(code)
}

func layoutDir(t *testing.T) string {
	t.Helper()
	dir, err := built()
	if err != nil {
		t.Fatalf("building the image: %v", err)
	}
	return dir
}

// ---- reading an OCI image layout by the spec, without the library that wrote it -------

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		Env          []string            `json:"Env"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// blob reads a blob and checks its size and sha256 digest.
func blob(t *testing.T, dir string, d descriptor) []byte {
	t.Helper()
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q is not sha256", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexDigest))
	if err != nil {
		t.Fatalf("blob %s: %v", d.Digest, err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != hexDigest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: content does not match its descriptor (size %d, want %d)", d.Digest, len(b), d.Size)
	}
	return b
}

type ociImage struct {
	manifestDigest string
	refName        string
	config         imageConfig
	layers         [][]byte // uncompressed tars, diff_ids checked
}

func readLayout(t *testing.T, dir string) ociImage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil || !strings.Contains(string(raw), `"imageLayoutVersion"`) {
		t.Fatalf("oci-layout: %q %v", raw, err)
	}
	var index struct {
		SchemaVersion int          `json:"schemaVersion"`
		Manifests     []descriptor `json:"manifests"`
	}
	raw, err = os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &index); err != nil || index.SchemaVersion != 2 || len(index.Manifests) != 1 {
		t.Fatalf("index.json: want schemaVersion 2 and one manifest: %s (%v)", raw, err)
	}
	md := index.Manifests[0]
	if md.MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Fatalf("index.json: manifest media type %q", md.MediaType)
	}
	var manifest struct {
		MediaType string       `json:"mediaType"`
		Config    descriptor   `json:"config"`
		Layers    []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(t, dir, md), &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
		t.Errorf("config media type %q", manifest.Config.MediaType)
	}
	img := ociImage{manifestDigest: md.Digest, refName: md.Annotations["org.opencontainers.image.ref.name"]}
	if err := json.Unmarshal(blob(t, dir, manifest.Config), &img.config); err != nil {
		t.Fatal(err)
	}
	if len(img.config.RootFS.DiffIDs) != len(manifest.Layers) {
		t.Fatalf("%d diff_ids for %d layers", len(img.config.RootFS.DiffIDs), len(manifest.Layers))
	}
	for i, l := range manifest.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Fatalf("layer %d: media type %q", i, l.MediaType)
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob(t, dir, l)))
		if err != nil {
			t.Fatal(err)
		}
		tarData, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(tarData)
		if "sha256:"+hex.EncodeToString(sum[:]) != img.config.RootFS.DiffIDs[i] {
			t.Fatalf("layer %d: uncompressed digest differs from the config's diff_id", i)
		}
		img.layers = append(img.layers, tarData)
	}
	return img
}

// unpack extracts the layers into a new root directory, as a container runtime would
// (regular files, directories, modes and owners; nothing outside the root).
func unpack(t *testing.T, img ociImage) string {
	t.Helper()
	// Not t.TempDir(): its directories are 0700, which the image's user could not enter.
	base, err := os.MkdirTemp("", "imagebuild-rootfs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	root := filepath.Join(base, "rootfs")
	for _, d := range []string{base, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, layer := range img.layers {
		tr := tar.NewReader(bytes.NewReader(layer))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			name := filepath.Clean(h.Name)
			if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
				t.Fatalf("layer entry %q escapes the root", h.Name)
			}
			target := filepath.Join(root, name)
			mode := os.FileMode(h.Mode & 0o777)
			switch h.Typeflag {
			case tar.TypeDir:
				if err := os.MkdirAll(target, mode); err != nil {
					t.Fatal(err)
				}
			case tar.TypeReg:
				f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(f, tr); err != nil {
					t.Fatal(err)
				}
				f.Close()
			default:
				t.Fatalf("layer entry %q: unexpected type %c", h.Name, h.Typeflag)
			}
			// Chmod again: MkdirAll and OpenFile apply the umask and drop the sticky bit.
			perm := mode
			if h.Mode&0o1000 != 0 {
				perm |= os.ModeSticky
			}
			if err := os.Chmod(target, perm); err != nil {
				t.Fatal(err)
			}
			if os.Geteuid() == 0 {
				if err := os.Lchown(target, h.Uid, h.Gid); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return root
}

// ---- the image's metadata and filesystem ---------------------------------------------

func TestImageLayoutConfigAndFilesystem(t *testing.T) {
	dir := layoutDir(t)
	img := readLayout(t, dir)
	c := img.config
	if c.OS != "linux" || c.Architecture == "" {
		t.Errorf("os/architecture %q/%q", c.OS, c.Architecture)
	}
	if img.refName != testVersion {
		t.Errorf("index.json ref.name %q, want %q", img.refName, testVersion)
	}
	uid, gid, ok := parseUser(c.Config.User)
	if !ok || uid == 0 || gid == 0 {
		t.Errorf("User %q: want a numeric non-root uid:gid (runAsNonRoot can only verify a number)", c.Config.User)
	}
	if !slices.Equal(c.Config.Entrypoint, []string{"/bridge"}) {
		t.Errorf("Entrypoint %q", c.Config.Entrypoint)
	}
	if !slices.Equal(c.Config.Cmd, []string{"run", "-c", "/etc/delay-bridge/bridge.yaml"}) {
		t.Errorf("Cmd %q (the chart and compose mount bridge.yaml there)", c.Config.Cmd)
	}
	if _, ok := c.Config.ExposedPorts["8089/tcp"]; !ok {
		t.Errorf("ExposedPorts %v lack 8089/tcp", c.Config.ExposedPorts)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   DefaultSource,
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": testRevision,
	} {
		if got := c.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}

	root := unpack(t, img)
	// The binary: an executable static ELF for the image's architecture.
	bin := filepath.Join(root, "bridge")
	fi, err := os.Stat(bin)
	if err != nil || fi.Mode().Perm()&0o005 != 0o005 {
		t.Fatalf("/bridge: %v (mode %v): want it readable and executable by any user", err, fi.Mode())
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("/bridge is not an ELF binary: %v", err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("/bridge has a program interpreter: it is dynamically linked (CGO_ENABLED=0 missing?)")
		}
	}
	if libs, _ := ef.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("/bridge needs shared libraries %v", libs)
	}
	if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[c.Architecture]; want != 0 && ef.Machine != want {
		t.Errorf("/bridge is for %v, the config says %s", ef.Machine, c.Architecture)
	}
	ef.Close()
	// CA certificates where Go's crypto/x509 (and SSL_CERT_FILE) look.
	pem, err := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
		t.Errorf("Env %q lacks SSL_CERT_FILE", c.Config.Env)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Error("/etc/ssl/certs/ca-certificates.crt holds no certificate")
	}
	// The declared user exists, /tmp is writable by it.
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil || !strings.Contains(string(passwd), fmt.Sprintf(":x:%d:%d:", uid, gid)) {
		t.Errorf("/etc/passwd lacks the image user %d:%d: %q %v", uid, gid, passwd, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("/tmp: %v %v, want drwxrwxrwt", fi.Mode(), err)
	}
	// Nothing else: no shell, no package manager.
	for _, absent := range []string{"bin/sh", "bin/busybox", "usr"} {
		if _, err := os.Stat(filepath.Join(root, absent)); err == nil {
			t.Errorf("the image contains /%s", absent)
		}
	}
}

// The same inputs give the same image digest.
func TestImageReproducible(t *testing.T) {
	first := readLayout(t, layoutDir(t))
	dir := t.TempDir()
	res, err := Build(Options{Repo: repoRoot, Out: filepath.Join(dir, "oci"), Version: testVersion,
		Revision: testRevision, GoFlags: []string{"-p=1"}})
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Dir(res.Binary))
	if res.Digest.String() != first.manifestDigest {
		t.Errorf("a second build gave %s, the first %s", res.Digest, first.manifestDigest)
	}
}

func parseUser(u string) (uid, gid int, ok bool) {
	us, gs, found := strings.Cut(u, ":")
	var err1, err2 error
	uid, err1 = strconv.Atoi(us)
	gid = uid
	if found {
		gid, err2 = strconv.Atoi(gs)
	}
	return uid, gid, err1 == nil && err2 == nil
}

// ---- the smoke: the image's entrypoint, as its user, against Redis and Kafka ----------

// startInImage runs args (entrypoint + args) inside root as the image's user: chroot into
// the unpacked filesystem and setuid/setgid to the declared ids. As root that is a plain
// chroot + setuid; otherwise a user namespace maps the image's ids to the caller's.
func startInImage(t *testing.T, root string, c imageConfig, args []string, stdout, stderr io.Writer) *exec.Cmd {
	t.Helper()
	uid, gid, ok := parseUser(c.Config.User)
	if !ok {
		t.Fatalf("User %q is not numeric", c.Config.User)
	}
	// Resolve the program inside the root: exec happens after the chroot.
	cmd := &exec.Cmd{Path: args[0], Args: args, Env: c.Config.Env, Dir: "/", Stdout: stdout, Stderr: stderr}
	attr := &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Setpgid: true}
	if os.Geteuid() != 0 {
		attr.Cloneflags = syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		attr.Credential.NoSetGroups = true
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %q in the image root as %s: %v (needs root, or unprivileged user namespaces)", args, c.Config.User, err)
	}
	return cmd
}

// procUID is the real uid of a running process as the kernel reports it.
func procUID(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
			return strings.Fields(rest)[0], nil
		}
	}
	return "", errors.New("no Uid line")
}

func TestImageSmoke(t *testing.T) {
	img := readLayout(t, layoutDir(t))
	root := unpack(t, img)
	c := img.config

	rds := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 2, "smoke.delay", "smoke")
	adminPort := testkit.FreePort(t)
	admin := "127.0.0.1:" + strconv.Itoa(adminPort)
	// What a volume mount at the Cmd's config path would provide.
	bridgeYAML := fmt.Sprintf(`cluster: smoke
shards: 8
prefix: %s
redis: { addrs: [%q] }
kafka: { brokers: [%q], group_id: image-smoke }
admin: { listen: %q }
log: { level: info, format: text }
routes:
  - name: smoke
    from: { kafka: { topic: smoke.delay } }
    to:   { kafka: { topic: smoke } }
`, testkit.Uniq(t, "img"), rds.Addr(), kaddr, admin)
	cfgPath := c.Config.Cmd[len(c.Config.Cmd)-1]
	if err := os.WriteFile(filepath.Join(root, cfgPath), []byte(bridgeYAML), 0o644); err != nil {
		t.Fatalf("writing %s into the image root: %v", cfgPath, err)
	}

	var logs testkit.Buffer
	bridge := startInImage(t, root, c, append(slices.Clone(c.Config.Entrypoint), c.Config.Cmd...), &logs, &logs)
	exited := make(chan error, 1)
	go func() { exited <- bridge.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(-bridge.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	if got, err := procUID(bridge.Process.Pid); err != nil || (os.Geteuid() == 0 && got != strings.Split(c.Config.User, ":")[0]) {
		t.Errorf("the bridge runs as uid %q (%v), the image declares %s", got, err, c.Config.User)
	}

	// Ready: Redis reached, shards owned, ingress consuming.
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the image's entrypoint exited before it was ready: %v\n%s", err, logs.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 60s:\n%s", logs.String())
		}
	}

	// The compose healthcheck: `bridge ctl ready`, run from the image as its user.
	var hcOut testkit.Buffer
	hc := startInImage(t, root, c, []string{c.Config.Entrypoint[0], "ctl", "--addr", "http://" + admin, "ready"}, &hcOut, &hcOut)
	if err := hc.Wait(); err != nil {
		t.Errorf("`bridge ctl ready` in the image: %v\n%s", err, hcOut.String())
	}
	var hcDown testkit.Buffer
	hc = startInImage(t, root, c, []string{c.Config.Entrypoint[0], "ctl", "--addr", "http://127.0.0.1:1", "--timeout", "2s", "ready"}, &hcDown, &hcDown)
	if err := hc.Wait(); err == nil {
		t.Errorf("`bridge ctl ready` against a closed port succeeded:\n%s", hcDown.String())
	}

	smokeDeliveries(t, kaddr, &logs)

	// SIGTERM: a clean shutdown, exit status 0.
	if err := bridge.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("after SIGTERM the bridge exited with %v:\n%s", err, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the bridge did not stop within 60s of SIGTERM:\n%s", logs.String())
	}
}

// smokeDeliveries produces messages with x-delay to smoke.delay and checks each arrives
// on smoke once, not before its due time, and within a generous bound after it.
func smokeDeliveries(t *testing.T, kaddr string, logs *testkit.Buffer) {
	t.Helper()
	const n = 40
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics("smoke"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(kaddr))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	due := map[string]time.Time{}
	base := time.Now().Truncate(time.Millisecond)
	for i := range n {
		id := fmt.Sprintf("smoke-%d", i)
		delay := time.Duration(200+i*40) * time.Millisecond // 0.2 s .. 1.8 s
		due[id] = base.Add(delay)
		rec := &kgo.Record{Topic: "smoke.delay", Key: []byte(id), Value: []byte("payload " + id), Timestamp: base,
			Headers: []kgo.RecordHeader{{Key: "x-delay", Value: []byte(strconv.Itoa(int(delay.Milliseconds())))}, {Key: "x-message-id", Value: []byte(id)}}}
		if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	seen := map[string]int{}
	var maxLate time.Duration
	for len(seen) < n {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("only %d of %d messages arrived within 90s:\n%s", len(seen), n, logs.String())
		}
		arrived := time.Now()
		fetches.EachRecord(func(r *kgo.Record) {
			id := string(r.Key)
			d, ok := due[id]
			if !ok {
				t.Errorf("unexpected record %q", id)
				return
			}
			seen[id]++
			if seen[id] > 1 {
				t.Errorf("%s arrived %d times", id, seen[id])
			}
			if string(r.Value) != "payload "+id {
				t.Errorf("%s: payload %q", id, r.Value)
			}
			if arrived.Before(d) {
				t.Errorf("%s arrived %v before its due time", id, d.Sub(arrived))
			}
			late := arrived.Sub(d)
			maxLate = max(maxLate, late)
			// Generous: a loaded CI machine is slow; the point is "fired when due",
			// not a latency figure.
			if late > 10*time.Second {
				t.Errorf("%s arrived %v after its due time", id, late)
			}
		})
	}
	t.Logf("%d messages delivered from the image, none early, latest %v after due (as seen by a polling consumer)", n, maxLate)
}
