package main

// SASL_SSL with SCRAM-SHA-256 when KAFSCALE_SASL_USER is set (the security tests),
// using xdg-go/scram (Debian golang-github-xdg-go-scram-dev) as sarama's SCRAM client.

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"io/ioutil"
	"os"

	"github.com/Shopify/sarama"
	"github.com/xdg-go/scram"
)

type scramClient struct {
	*scram.Client
	*scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	client, err := scram.HashGeneratorFcn(sha256.New).NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.Client = client
	c.ClientConversation = client.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.ClientConversation.Step(challenge) }
func (c *scramClient) Done() bool                             { return c.ClientConversation.Done() }

func secure(config *sarama.Config) {
	user := os.Getenv("KAFSCALE_SASL_USER")
	if user == "" {
		return
	}
	pem, err := ioutil.ReadFile(os.Getenv("KAFSCALE_CA_FILE"))
	fail(err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	config.Net.TLS.Enable = true
	config.Net.TLS.Config = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	config.Net.SASL.Enable = true
	config.Net.SASL.User = user
	config.Net.SASL.Password = os.Getenv("KAFSCALE_SASL_PASSWORD")
	config.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
	config.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{} }
}
