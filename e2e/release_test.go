package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// previousRelease is the commit of the release before this code: the rolling-upgrade
// tests (upgrade_test.go) run its binary beside HEAD's. At each release, once the release
// commit is in the main history, set this to that commit (the full hash, `git rev-parse
// <tag>^{commit}`), so the next changes are tested against what is deployed; adjust
// release.adapt if HEAD's configuration is no longer what that release reads.
// DELAYBRIDGE_PREVIOUS_RELEASE overrides it for one run (any commit-ish git knows).
const previousRelease = "ca186271018579271e44eddc5920ef4f3c5b1c03"

// groupRelease is the last release whose Kafka ingress was a consumer group (before
// partition leases): TestRollingUpgradeFromGroupRelease upgrades from it.
const groupRelease = "9766fd297adaf5f0b5dea8b501d29a52b8fa060e"

// release is one version of the bridge the upgrade tests run.
type release struct {
	name string // "old" or "new", for logs
	bin  string
	// coldTier: the release has the cold tier (store level 5, scheduler.cold_horizon).
	coldTier bool
	// version is what the binary reports (build_info's version label), to check that
	// each process is the release the test meant.
	version string
	// adapt rewrites a configuration written for HEAD into one this binary reads. The
	// identity while the formats agree; when HEAD renames or adds a setting, the
	// previous release's adapt removes or renames it back (and the next release move
	// drops that rewrite again).
	adapt func(cfg string) string
}

// argv is the command line that runs this release with the configuration at cfg.
func (r release) argv(cfg string) []string { return []string{r.bin, "run", "-c", cfg} }

// headRelease is the binary TestMain built from this tree.
func headRelease() release {
	return release{name: "new", bin: bridgeBin, version: "dev", coldTier: true, adapt: func(cfg string) string { return cfg }}
}

// previousBuilds caches the previous-release binaries by commit for the test binary's
// run: built the first time an upgrade test asks, into TestMain's temporary directory.
// A failed build is remembered too, so the next test fails at once with the same output.
var previousBuilds struct {
	sync.Mutex
	bins   map[string]string
	failed map[string]string
}

// previousReleaseBuild returns the previous release (previousRelease, or
// DELAYBRIDGE_PREVIOUS_RELEASE), built from git with the same flags as HEAD's binary.
// A tree without git history or without that commit fails the test with what to fetch:
// the upgrade tests are never skipped.
func previousReleaseBuild(t *testing.T) release {
	t.Helper()
	want := previousRelease
	if v := os.Getenv("DELAYBRIDGE_PREVIOUS_RELEASE"); v != "" {
		want = v
	}
	return releaseBuild(t, want)
}

// coldHorizonKey matches scheduler.cold_horizon in the flow-style scheduler line of the
// tests' configurations.
var coldHorizonKey = regexp.MustCompile(`, cold_horizon: [0-9a-z]+`)

// beforeColdHorizon are the releases the upgrade tests run that predate
// scheduler.cold_horizon (the cold tier, store level 5): their adapt removes the key.
var beforeColdHorizon = map[string]bool{
	"9fc0e734ba95af17940724481f77b9492367542f": true, // store level 4
	groupRelease: true,
}

// releaseBuild returns the release at the commit-ish want, built from git once per run.
func releaseBuild(t *testing.T, want string) release {
	t.Helper()
	commit := resolveCommit(t, want)
	version := "previous-" + commit[:12]
	previousBuilds.Lock()
	defer previousBuilds.Unlock()
	old := release{name: "old", version: version, coldTier: true, adapt: func(cfg string) string { return cfg }}
	if beforeColdHorizon[commit] {
		old.coldTier = false
		old.adapt = func(cfg string) string { return coldHorizonKey.ReplaceAllString(cfg, "") }
	}
	if bin, ok := previousBuilds.bins[commit]; ok {
		old.bin = bin
		return old
	}
	if msg, ok := previousBuilds.failed[commit]; ok {
		t.Fatal(msg)
	}
	began := time.Now()
	bin, err := buildPrevious(commit, version)
	if err != nil {
		if previousBuilds.failed == nil {
			previousBuilds.failed = map[string]string{}
		}
		previousBuilds.failed[commit] = "upgrade tests: " + err.Error()
		t.Fatal(previousBuilds.failed[commit])
	}
	if previousBuilds.bins == nil {
		previousBuilds.bins = map[string]string{}
	}
	previousBuilds.bins[commit] = bin
	t.Logf("upgrade tests: built the previous release %s in %s", commit[:12], time.Since(began).Round(time.Second))
	old.bin = bin
	return old
}

// buildPrevious exports commit with git archive into TestMain's temporary directory and
// builds its ./cmd/bridge there (with -race unless DELAYBRIDGE_TEST_E2E_NORACE is set,
// like HEAD's), reporting version. It returns the binary's path.
func buildPrevious(commit, version string) (string, error) {
	dir := filepath.Join(filepath.Dir(bridgeBin), "previous-"+commit[:12])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tarball := filepath.Join(dir, "src.tar")
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if out, err := gitCmd("archive", "--format=tar", "-o", tarball, commit).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %w\n%s", commit, err, out)
	}
	if out, err := exec.Command("tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpacking the previous release: %w\n%s", err, out)
	}
	bin := filepath.Join(dir, "bridge")
	args := []string{"build", "-ldflags", "-X main.version=" + version, "-o", bin, "./cmd/bridge"}
	if os.Getenv("DELAYBRIDGE_TEST_E2E_NORACE") == "" {
		args = append(args[:1], append([]string{"-race"}, args[1:]...)...)
	}
	build := exec.Command("go", args...)
	build.Dir = src
	// Its own go.mod decides its dependencies, never a go.work around this tree.
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the previous release %s (go %s in %s): %w\n%s",
			commit, strings.Join(args, " "), src, err, out)
	}
	_ = os.RemoveAll(src)
	_ = os.Remove(tarball)
	return bin, nil
}

// gitCmd runs git in this module's checkout (the parent of e2e/).
func gitCmd(args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = ".."
	return cmd
}

// resolveCommit returns the full hash of rev in this checkout, or fails the test with
// how to get it.
func resolveCommit(t *testing.T, rev string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("upgrade tests: git not found (%v): they build the previous release %s from this checkout's history; install git", err, rev)
	}
	if out, err := gitCmd("rev-parse", "--git-dir").CombinedOutput(); err != nil {
		t.Fatalf("upgrade tests: %s is not a git checkout (%v: %s); they build the previous release %s from its history: "+
			"run them in a clone (git clone <repository>), not an exported tree", absParent(), err, strings.TrimSpace(string(out)), rev)
	}
	out, err := gitCmd("rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
	if err != nil {
		shallow, _ := gitCmd("rev-parse", "--is-shallow-repository").Output()
		t.Fatalf("upgrade tests: the previous release %s is not in this checkout (shallow clone: %s); fetch it with "+
			"`git fetch --unshallow` (or `git fetch origin %s`), or point DELAYBRIDGE_PREVIOUS_RELEASE at a commit you have",
			rev, strings.TrimSpace(string(shallow)), rev)
	}
	return strings.TrimSpace(string(out))
}

func absParent() string {
	p, err := filepath.Abs("..")
	if err != nil {
		return ".."
	}
	return p
}

// checkRelease fails the test unless p reports rel's version (build_info): the process
// is the binary the test meant.
func checkRelease(t *testing.T, p *bridgeProc, rel release) {
	t.Helper()
	if v := p.metric("build_info", fmt.Sprintf("version=%q", rel.version)); v != 1 {
		t.Fatalf("bridge %s: build_info has no version=%q series: not the %s release's binary", p.admin, rel.version, rel.name)
	}
}
