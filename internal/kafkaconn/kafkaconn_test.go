package kafkaconn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/twmb/franz-go/pkg/kfake"
	xdgscram "github.com/xdg-go/scram"
	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scramServer is an RFC 5802 server conversation (xdg-go/scram's, an implementation
// independent of the exchange under test's wiring) for user with password, salt and
// iteration count as in the RFC 7677 §3 example.
func scramServer(t *testing.T, user, password string) *xdgscram.ServerConversation {
	t.Helper()
	client, err := xdgscram.SHA256.NewClient(user, password, "")
	if err != nil {
		t.Fatal(err)
	}
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	creds := client.GetStoredCredentials(xdgscram.KeyFactors{Salt: string(salt), Iters: 4096})
	srv, err := xdgscram.SHA256.NewServer(func(u string) (xdgscram.StoredCredentials, error) {
		if u != user {
			return xdgscram.StoredCredentials{}, errors.New("unknown user")
		}
		return creds, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv.NewConversation()
}

// exchange runs mech against server to the end; it returns the client's error, if any.
func exchange(t *testing.T, mech sasl.Mechanism, server *xdgscram.ServerConversation) error {
	t.Helper()
	ctx := context.Background()
	sm, msg, err := mech.Start(ctx)
	if err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		challenge, serr := server.Step(string(msg))
		if serr != nil && challenge == "" {
			t.Fatalf("server step %d: %v", i, serr)
		}
		done, resp, err := sm.Next(ctx, []byte(challenge))
		if err != nil || done {
			if err == nil && !server.Valid() {
				t.Fatal("client done but the server did not accept its proof")
			}
			return err
		}
		msg = resp
	}
	t.Fatal("exchange did not end")
	return nil
}

// The RFC 7677 §3 credentials (user "user", password "pencil", its salt, 4096
// iterations): the client proves the password to a server holding only the stored
// key, and checks the server's signature; a server with another password's keys is
// refused, permanently.
func TestScramRFC7677Credentials(t *testing.T) {
	m, err := Mechanism(SASL{Mechanism: MechanismScramSHA256, Username: "user", Password: "pencil"})
	if err != nil {
		t.Fatal(err)
	}
	if err := exchange(t, m, scramServer(t, "user", "pencil")); err != nil {
		t.Fatalf("exchange: %v", err)
	}
	if err := exchange(t, m, scramServer(t, "user", "not pencil")); err == nil || !fault.IsPermanent(err) {
		t.Fatalf("server with other keys: want a permanent error, got %v", err)
	}
}

func TestScramRejectsBadServer(t *testing.T) {
	m, err := Mechanism(SASL{Mechanism: MechanismScramSHA512, Username: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	// %s is the client's nonce.
	cases := map[string]string{
		"foreign nonce":   "r=other,s=QSXCR+Q6sek8bf92,i=4096",
		"same nonce":      "r=%s,s=QSXCR+Q6sek8bf92,i=4096",
		"few iterations":  "r=%sdef,s=QSXCR+Q6sek8bf92,i=1",
		"bad salt":        "r=%sdef,s=***,i=4096",
		"server error":    "e=other-error",
		"malformed":       "garbage",
		"extension":       "m=ext,r=%sdef,s=QSXCR+Q6sek8bf92,i=4096",
		"no iteration":    "r=%sdef,s=QSXCR+Q6sek8bf92",
		"bad iterations":  "r=%sdef,s=QSXCR+Q6sek8bf92,i=x",
		"empty attribute": "r=%sdef,,i=4096",
	}
	start := func() (sasl.StateMachine, string) {
		sm, first, err := m.Start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, nonce, ok := strings.Cut(string(first), ",r=")
		if !strings.HasPrefix(string(first), "n,,n=u,r=") || !ok || nonce == "" {
			t.Fatalf("client-first %q", first)
		}
		return sm, nonce
	}
	for name, tmpl := range cases {
		sm, nonce := start()
		first := strings.ReplaceAll(tmpl, "%s", nonce)
		if _, _, err := sm.Next(context.Background(), []byte(first)); err == nil || !fault.IsPermanent(err) {
			t.Errorf("%s: %q: want a permanent error, got %v", name, first, err)
		}
	}
	// A wrong server signature in the final message is refused.
	sm, nonce := start()
	if _, _, err := sm.Next(context.Background(), []byte("r="+nonce+"def,s=QSXCR+Q6sek8bf92,i=4096")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sm.Next(context.Background(), []byte("v=AAAA")); err == nil || !fault.IsPermanent(err) {
		t.Fatalf("bad server signature: %v", err)
	}
}

// The username is escaped in the client-first message ("=" as "=3D", "," as "=2C").
func TestSaslName(t *testing.T) {
	m, err := Mechanism(SASL{Mechanism: MechanismScramSHA256, Username: "a=b,c", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	_, first, err := m.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(first), "n,,n=a=3Db=2Cc,r=") {
		t.Fatal(string(first))
	}
}

func TestMechanismConfig(t *testing.T) {
	for _, name := range []string{"", "plain", "PLAIN", "scram-sha-256", "SCRAM-SHA-512"} {
		if _, err := Mechanism(SASL{Mechanism: name, Username: "u", Password: "p"}); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	if _, err := Mechanism(SASL{Mechanism: "GSSAPI"}); err == nil || !fault.IsPermanent(err) {
		t.Errorf("GSSAPI accepted: %v", err)
	}
	if _, err := Mechanism(SASL{Mechanism: "SCRAM-SHA-256"}); err == nil || !fault.IsPermanent(err) {
		t.Errorf("SCRAM without username accepted: %v", err)
	}
	if _, err := Dialer(Config{}); err == nil || !fault.IsPermanent(err) {
		t.Errorf("no brokers accepted: %v", err)
	}
	if err := (Config{Brokers: []string{"b:9092"}, SASL: SASL{Mechanism: "KERBEROS"}}).Validate(); err == nil || !fault.IsPermanent(err) {
		t.Errorf("Validate accepted an unknown mechanism: %v", err)
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
			good := Config{Brokers: []string{addr}, SASL: SASL{Mechanism: mech, Username: "bridge", Password: "s3cret,=x"}}
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
			if !fault.IsPermanent(err) {
				t.Fatalf("wrong password is not permanent: %v", err)
			}
			none := good
			none.SASL = SASL{}
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
	// The TLS settings as app builds them from kafka.tls (config.TLSConfig's
	// ClientTLS: CA file, client certificate and key files; its file errors are tested
	// in package config).
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM")
	}
	clientPair, err := tls.LoadX509KeyPair(clientCertFile, clientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	good := Config{Brokers: []string{addr}, TLS: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{clientPair}}}
	if err := Ping(ctx, good); err != nil {
		t.Fatalf("trusted CA: %v", err)
	}
	untrusted := Config{Brokers: []string{addr}, TLS: &tls.Config{MinVersion: tls.VersionTLS12}}
	err = Ping(ctx, untrusted)
	if err == nil || !fault.IsPermanent(err) {
		t.Fatalf("untrusted server certificate: want a permanent error, got %v", err)
	}
	skip := Config{Brokers: []string{addr}, TLS: &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}} //nolint:gosec // the test of the option
	if err := Ping(ctx, skip); err != nil {
		t.Fatalf("insecure_skip_verify: %v", err)
	}
}

func TestPingUnreachableIsNotPermanent(t *testing.T) {
	addr := net.JoinHostPort("127.0.0.1", itoa(testkit.FreePort(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := Ping(ctx, Config{Brokers: []string{addr}})
	if err == nil || fault.IsPermanent(err) {
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
