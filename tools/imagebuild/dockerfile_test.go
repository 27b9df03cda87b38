package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// finalStage returns the instructions of the Dockerfile's last stage (continuation lines
// joined, comments dropped) and the whole file's RUN lines.
func parseDockerfile(t *testing.T) (final []string, runs []string, from string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var cur strings.Builder
	for _, l := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(l)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		line := cur.String()
		cur.Reset()
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			final, from = nil, strings.TrimSpace(rest)
		case "RUN":
			runs = append(runs, rest)
		}
		final = append(final, line)
	}
	return final, runs, from
}

func instruction(final []string, name string) []string {
	var out []string
	for _, l := range final {
		if instr, rest, _ := strings.Cut(l, " "); strings.EqualFold(instr, name) {
			out = append(out, strings.TrimSpace(rest))
		}
	}
	return out
}

// TestDockerfileMatchesImagebuild: the Dockerfile and `go run ./tools/imagebuild`
// build the same image (same go build command, files, user, entrypoint, labels).
func TestDockerfileMatchesImagebuild(t *testing.T) {
	final, runs, from := parseDockerfile(t)
	if from != "scratch" {
		t.Errorf("final stage FROM %q; imagebuild builds on an empty base (scratch)", from)
	}
	goBuild := "go " + strings.Join(quoteArgs(GoBuildArgs("$VERSION", "/out/bridge")), " ")
	if !slices.ContainsFunc(runs, func(r string) bool { return strings.Contains(r, goBuild) && strings.Contains(r, "CGO_ENABLED=0") }) {
		t.Errorf("no RUN with CGO_ENABLED=0 %s (imagebuild's build command) in %q", goBuild, runs)
	}
	files := strings.Join(runs, "\n")
	for _, want := range []string{
		"printf '" + strings.ReplaceAll(Passwd, "\n", `\n`) + "' > /out/rootfs/etc/passwd",
		"printf '" + strings.ReplaceAll(Group, "\n", `\n`) + "' > /out/rootfs/etc/group",
		"/out/rootfs" + CACertsPath, "chmod 1777 /out/rootfs/tmp", "/out/rootfs/etc/delay-bridge",
	} {
		if !strings.Contains(files, want) {
			t.Errorf("the Dockerfile does not write the image files as imagebuild does: no %q", want)
		}
	}
	if got := instruction(final, "USER"); !slices.Equal(got, []string{User}) {
		t.Errorf("USER %q, imagebuild %q", got, User)
	}
	if got := instruction(final, "EXPOSE"); !slices.Equal(got, []string{strings.TrimSuffix(AdminPort, "/tcp")}) {
		t.Errorf("EXPOSE %q, imagebuild %q", got, AdminPort)
	}
	for name, want := range map[string][]string{"ENTRYPOINT": Entrypoint, "CMD": Cmd} {
		got := instruction(final, name)
		var form []string
		if len(got) != 1 || json.Unmarshal([]byte(got[0]), &form) != nil || !slices.Equal(form, want) {
			t.Errorf("%s %q, imagebuild %q (exec form)", name, got, want)
		}
	}
	env := strings.Join(instruction(final, "ENV"), " ")
	for _, e := range Env {
		if !strings.Contains(env, e) {
			t.Errorf("ENV lacks %s", e)
		}
	}
	labels := strings.Join(instruction(final, "LABEL"), " ")
	for k, v := range map[string]string{
		"org.opencontainers.image.source":   DefaultSource,
		"org.opencontainers.image.version":  "$VERSION",
		"org.opencontainers.image.revision": "$REVISION",
		"org.opencontainers.image.title":    "delay-bridge",
	} {
		if !strings.Contains(labels, k+`="`+v+`"`) {
			t.Errorf("LABEL lacks %s=%q", k, v)
		}
	}
	copies := instruction(final, "COPY")
	for _, want := range []string{"--from=build /out/rootfs/ /", "--from=build /out/bridge " + BinaryPath} {
		if !slices.Contains(copies, want) {
			t.Errorf("final stage lacks COPY %s (has %q)", want, copies)
		}
	}
}

// quoteArgs quotes arguments with spaces as a shell line would.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.Contains(a, " ") {
			a = `"` + a + `"`
		}
		out[i] = a
	}
	return out
}
