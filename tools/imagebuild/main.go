package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func main() {
	var o Options
	var created string
	flag.StringVar(&o.Repo, "repo", ".", "repository root (go.mod, cmd/bridge)")
	flag.StringVar(&o.Out, "out", "dist/oci", "OCI image layout directory to write (must be empty or absent)")
	flag.StringVar(&o.Version, "version", "dev", "bridge version (main.version, org.opencontainers.image.version)")
	flag.StringVar(&o.Revision, "revision", "", "org.opencontainers.image.revision (default: git rev-parse HEAD)")
	flag.StringVar(&o.Source, "source", DefaultSource, "org.opencontainers.image.source")
	flag.StringVar(&o.Arch, "arch", "", "GOARCH of the image (default: this machine's)")
	flag.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle copied into the image")
	flag.StringVar(&o.Tag, "tag", "", "ref name recorded in index.json (default: -version)")
	flag.StringVar(&created, "created", "", "RFC 3339 creation time (default: $SOURCE_DATE_EPOCH, else the Unix epoch)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "imagebuild: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	switch {
	case created != "":
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			fmt.Fprintf(os.Stderr, "imagebuild: -created: %v\n", err)
			os.Exit(2)
		}
		o.Created = t
	case os.Getenv("SOURCE_DATE_EPOCH") != "":
		var sec int64
		if _, err := fmt.Sscan(os.Getenv("SOURCE_DATE_EPOCH"), &sec); err != nil {
			fmt.Fprintf(os.Stderr, "imagebuild: SOURCE_DATE_EPOCH: %v\n", err)
			os.Exit(2)
		}
		o.Created = time.Unix(sec, 0).UTC()
	}
	res, err := Build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.RemoveAll(filepath.Dir(res.Binary))
	fmt.Printf("%s %s (user %s, entrypoint %q)\n", o.Out, res.Digest, res.Config.Config.User, res.Config.Config.Entrypoint)
}
