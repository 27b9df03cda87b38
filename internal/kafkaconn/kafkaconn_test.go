package kafkaconn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// RFC 7677 §3 test vector for SCRAM-SHA-256.
func TestScramRFC7677Vector(t *testing.T) {
	m, err := newScram(MechanismScramSHA256, "user", "pencil")
	if err != nil {
		t.Fatal(err)
	}
	s := &scramSession{m: m.(*scramMechanism), clientNonce: "rOprNGfwEbeRWgbNEkqO"}
	s.clientFirstBare = "n=user,r=" + s.clientNonce
	done, resp, err := s.Next(context.Background(), []byte("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"))
	if err != nil || done {
		t.Fatalf("step 1: done=%v err=%v", done, err)
	}
	want := "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
	if string(resp) != want {
		t.Fatalf("client-final\n got %s\nwant %s", resp, want)
	}
	done, _, err = s.Next(context.Background(), []byte("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="))
	if err != nil || !done {
		t.Fatalf("step 2: done=%v err=%v", done, err)
	}
}

func TestScramRejectsBadServer(t *testing.T) {
	m, _ := newScram(MechanismScramSHA512, "u", "p")
	cases := map[string]string{
		"foreign nonce":   "r=other,s=QSXCR+Q6sek8bf92,i=4096",
		"same nonce":      "r=abc,s=QSXCR+Q6sek8bf92,i=4096",
		"few iterations":  "r=abcdef,s=QSXCR+Q6sek8bf92,i=1",
		"bad salt":        "r=abcdef,s=***,i=4096",
		"server error":    "e=other-error",
		"malformed":       "garbage",
		"extension":       "m=ext,r=abcdef,s=QSXCR+Q6sek8bf92,i=4096",
		"no iteration":    "r=abcdef,s=QSXCR+Q6sek8bf92",
		"bad iterations":  "r=abcdef,s=QSXCR+Q6sek8bf92,i=x",
		"empty attribute": "r=abcdef,,i=4096",
	}
	for name, first := range cases {
		s := &scramSession{m: m.(*scramMechanism), clientNonce: "abc", clientFirstBare: "n=u,r=abc"}
		if _, _, err := s.Next(context.Background(), []byte(first)); err == nil {
			t.Errorf("%s: accepted %q", name, first)
		}
	}
	// A wrong server signature in the final message is refused.
	s := &scramSession{m: m.(*scramMechanism), clientNonce: "abc", clientFirstBare: "n=u,r=abc"}
	if _, _, err := s.Next(context.Background(), []byte("r=abcdef,s=QSXCR+Q6sek8bf92,i=4096")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Next(context.Background(), []byte("v=AAAA")); err == nil || !IsPermanent(err) {
		t.Fatalf("bad server signature: %v", err)
	}
}

func TestSaslName(t *testing.T) {
	if got := saslName("a=b,c"); got != "a=3Db=2Cc" {
		t.Fatal(got)
	}
}

func TestMechanismConfig(t *testing.T) {
	for _, name := range []string{"", "plain", "PLAIN", "scram-sha-256", "SCRAM-SHA-512"} {
		if _, err := Mechanism(config.SASLConfig{Mechanism: name, Username: "u", Password: "p"}); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	if _, err := Mechanism(config.SASLConfig{Mechanism: "GSSAPI"}); err == nil {
		t.Error("GSSAPI accepted")
	}
	if _, err := Mechanism(config.SASLConfig{Mechanism: "SCRAM-SHA-256"}); err == nil {
		t.Error("SCRAM without username accepted")
	}
	if _, err := Dialer(config.KafkaConfig{}); err == nil {
		t.Error("no brokers accepted")
	}
}

func startSASL(t *testing.T, method, user, pass string) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(testkit.FreePort(t)), kfake.EnableSASL(), kfake.Superuser(method, user, pass))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

func TestSASLAgainstBroker(t *testing.T) {
	for _, mech := range []string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			addr := startSASL(t, mech, "bridge", "s3cret,=x")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			good := config.KafkaConfig{Brokers: []string{addr}, SASL: config.SASLConfig{Mechanism: mech, Username: "bridge", Password: "s3cret,=x"}}
			if err := Ping(ctx, good); err != nil {
				t.Fatalf("good credentials: %v", err)
			}
			tr, err := Transport(good)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			bad := good
			bad.SASL.Password = "wrong"
			err = Ping(ctx, bad)
			if err == nil {
				t.Fatal("wrong password accepted")
			}
			if !IsPermanent(err) {
				t.Fatalf("wrong password is not permanent: %v", err)
			}
			none := good
			none.SASL = config.SASLConfig{}
			if err := Ping(ctx, none); err == nil {
				t.Fatal("no SASL accepted by a SASL broker")
			}
		})
	}
}

func TestTLSAgainstBroker(t *testing.T) {
	dir := t.TempDir()
	caPEM, serverCert, clientCertFile, clientKeyFile := makePKI(t, dir)
	port := testkit.FreePort(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := net.JoinHostPort("127.0.0.1", itoa(port))
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	good := config.KafkaConfig{Brokers: []string{addr}, TLS: config.TLSConfig{Enabled: true, CAFile: caFile, CertFile: clientCertFile, KeyFile: clientKeyFile}}
	if err := Ping(ctx, good); err != nil {
		t.Fatalf("trusted CA: %v", err)
	}
	untrusted := config.KafkaConfig{Brokers: []string{addr}, TLS: config.TLSConfig{Enabled: true}}
	err = Ping(ctx, untrusted)
	if err == nil || !IsPermanent(err) {
		t.Fatalf("untrusted server certificate: want a permanent error, got %v", err)
	}
	skip := config.KafkaConfig{Brokers: []string{addr}, TLS: config.TLSConfig{Enabled: true, InsecureSkipVerify: true}}
	if err := Ping(ctx, skip); err != nil {
		t.Fatalf("insecure_skip_verify: %v", err)
	}
	if _, err := TLSConfig(config.TLSConfig{Enabled: true, CAFile: filepath.Join(dir, "missing.pem")}); err == nil {
		t.Error("missing CA file accepted")
	}
	if _, err := TLSConfig(config.TLSConfig{Enabled: true, CertFile: clientCertFile}); err == nil {
		t.Error("cert without key accepted")
	}
	if tc, err := TLSConfig(config.TLSConfig{CAFile: "ignored"}); tc != nil || err != nil {
		t.Error("disabled TLS must yield nil")
	}
	notPEM := filepath.Join(dir, "not.pem")
	_ = os.WriteFile(notPEM, []byte("hello"), 0o600)
	if _, err := TLSConfig(config.TLSConfig{Enabled: true, CAFile: notPEM}); err == nil {
		t.Error("non-PEM CA accepted")
	}
}

func TestPingUnreachableIsNotPermanent(t *testing.T) {
	addr := net.JoinHostPort("127.0.0.1", itoa(testkit.FreePort(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := Ping(ctx, config.KafkaConfig{Brokers: []string{addr}})
	if err == nil || IsPermanent(err) {
		t.Fatalf("want a retryable error, got %v", err)
	}
}

func itoa(n int) string { return big.NewInt(int64(n)).String() }

// makePKI writes a CA, a server certificate for 127.0.0.1 and a client certificate.
func makePKI(t *testing.T, dir string) (caPEM []byte, server tls.Certificate, clientCert, clientKey string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	sc, sk := leaf(2, x509.ExtKeyUsageServerAuth)
	server, err = tls.X509KeyPair(sc, sk)
	if err != nil {
		t.Fatal(err)
	}
	cc, ck := leaf(3, x509.ExtKeyUsageClientAuth)
	clientCert, clientKey = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(clientCert, cc, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(clientKey, ck, 0o600); err != nil {
		t.Fatal(err)
	}
	return caPEM, server, clientCert, clientKey
}
