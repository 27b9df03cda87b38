package config

import (
	"os"
	"path/filepath"
	"testing"
)

// ClientTLS reads the files named by a tls section (kafka.tls, amqp.tls, redis.tls) and
// refuses what cannot work. (Moved from the Kafka connection tests, which now take the
// *tls.Config this builds.)
func TestClientTLSFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := (TLSConfig{Enabled: true, CAFile: filepath.Join(dir, "missing.pem")}).ClientTLS(); err == nil {
		t.Error("missing CA file accepted")
	}
	if _, err := (TLSConfig{Enabled: true, CertFile: filepath.Join(dir, "client.pem")}).ClientTLS(); err == nil {
		t.Error("cert without key accepted")
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (TLSConfig{Enabled: true, CAFile: notPEM}).ClientTLS(); err == nil {
		t.Error("non-PEM CA accepted")
	}
	tc, err := (TLSConfig{Enabled: true, InsecureSkipVerify: true}).ClientTLS()
	if err != nil || tc == nil || !tc.InsecureSkipVerify || tc.RootCAs != nil {
		t.Errorf("no files: %+v, %v; want system roots, insecure_skip_verify kept", tc, err)
	}
}
