package main

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
)

// fixedNow keeps every answer reproducible: the bundle derived from a config carries the clock's
// time nowhere but in certificates it would make, which a derivation makes none of.
var fixedNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// secretsFromConfig is `talosctl gen secrets --from-controlplane-config`
// (cmd/talosctl/cmd/mgmt/gen/secrets.go): the bundle, marshalled as that command writes it.
func secretsFromConfig(req request) response {
	cfg, err := configloader.NewFromBytes([]byte(req.Config))
	if err != nil {
		return failure(err)
	}

	bundle, err := bundleFromConfig(secrets.NewFixedClock(fixedNow), cfg)
	if err != nil {
		return failure(err)
	}

	out, err := yaml.Marshal(bundle)
	if err != nil {
		return failure(err)
	}

	return response{"secrets": string(out)}
}

// generateSecrets is `talosctl gen secrets` for a contract: a fresh bundle.
func generateSecrets(req request) response {
	contract, err := contractOf(req.Contract)
	if err != nil {
		return failure(err)
	}

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		return failure(err)
	}

	out, err := yaml.Marshal(bundle)
	if err != nil {
		return failure(err)
	}

	return response{"secrets": string(out)}
}

// certFacts are the properties of a bundle's certificate that must not depend on who generated
// it: everything but the serial, the key and the moment of issue.
type certFacts struct {
	Subject       string   `json:"subject"`
	Issuer        string   `json:"issuer"`
	SelfSigned    bool     `json:"self_signed"`
	IsCA          bool     `json:"is_ca"`
	KeyUsage      int      `json:"key_usage"`
	ExtKeyUsage   []int    `json:"ext_key_usage"`
	PublicKey     string   `json:"public_key"`
	SignatureAlg  string   `json:"signature_algorithm"`
	ValidForHours int64    `json:"valid_for_hours"`
	DNSNames      []string `json:"dns_names"`
	KeyMatches    bool     `json:"key_matches"`
	KeyPEMType    string   `json:"key_pem_type"`
}

// describeSecrets checks a bundle with upstream's own Bundle.Validate for the contract and lists
// its certificates' facts, so two bundles made by different programs can be compared field by
// field.
func describeSecrets(req request) response {
	bundle, err := loadSecrets(req.Secrets)
	if err != nil {
		return failure(err)
	}

	contract, err := contractOf(req.Contract)
	if err != nil {
		return failure(err)
	}

	resp := response{}
	if err := validateBundle(bundle, contract); err != nil {
		resp["validate_error"] = err.Error()
	}

	certs := map[string]any{}

	pairs := map[string]struct{ crt, key []byte }{}
	if c := bundle.Certs; c != nil {
		if c.Etcd != nil {
			pairs["etcd"] = struct{ crt, key []byte }{c.Etcd.Crt, c.Etcd.Key}
		}

		if c.K8s != nil {
			pairs["k8s"] = struct{ crt, key []byte }{c.K8s.Crt, c.K8s.Key}
		}

		if c.K8sAggregator != nil {
			pairs["k8saggregator"] = struct{ crt, key []byte }{c.K8sAggregator.Crt, c.K8sAggregator.Key}
		}

		if c.OS != nil {
			pairs["os"] = struct{ crt, key []byte }{c.OS.Crt, c.OS.Key}
		}

		if c.K8sServiceAccount != nil {
			block, _ := pem.Decode(c.K8sServiceAccount.Key)
			if block != nil {
				certs["k8sserviceaccount"] = map[string]string{"key_pem_type": block.Type}
			}
		}
	}

	for name, pair := range pairs {
		facts, err := describeCert(pair.crt, pair.key)
		if err != nil {
			certs[name] = map[string]string{"error": err.Error()}
		} else {
			certs[name] = facts
		}
	}

	resp["certs"] = certs

	if bundle.Secrets != nil {
		resp["bootstrap_token_len"] = len(bundle.Secrets.BootstrapToken)
		resp["secretbox_len"] = decodedLen(bundle.Secrets.SecretboxEncryptionSecret)
		resp["aescbc_len"] = decodedLen(bundle.Secrets.AESCBCEncryptionSecret)
	}

	if bundle.TrustdInfo != nil {
		resp["trustd_token_len"] = len(bundle.TrustdInfo.Token)
	}

	if bundle.Cluster != nil {
		// 1.13 writes the ID in base64's URL alphabet, 1.14 in the standard one
		// (config/types/cluster/discovery_identity.go ClusterIDEncoding @ v1.14.1); one ID shows
		// its alphabet only when it happens to hold one of the four characters that differ.
		resp["cluster_id_len"] = max(decodedLen(bundle.Cluster.ID), urlDecodedLen(bundle.Cluster.ID))
		resp["cluster_id_alphabet"] = alphabet(bundle.Cluster.ID)
		resp["cluster_secret_len"] = decodedLen(bundle.Cluster.Secret)
	}

	return resp
}

func decodedLen(b64 string) int {
	if b64 == "" {
		return 0
	}

	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return -1
	}

	return len(raw)
}

func urlDecodedLen(b64 string) int {
	raw, err := base64.URLEncoding.DecodeString(b64)
	if err != nil {
		return -1
	}

	return len(raw)
}

func alphabet(b64 string) string {
	switch {
	case strings.ContainsAny(b64, "-_"):
		return "url"
	case strings.ContainsAny(b64, "+/"):
		return "standard"
	default:
		return "either"
	}
}

func describeCert(crtPEM, keyPEM []byte) (*certFacts, error) {
	block, _ := pem.Decode(crtPEM)
	if block == nil {
		return nil, fmt.Errorf("no PEM certificate")
	}

	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}

	facts := &certFacts{
		Subject:       crt.Subject.String(),
		Issuer:        crt.Issuer.String(),
		SelfSigned:    crt.CheckSignatureFrom(crt) == nil,
		IsCA:          crt.IsCA,
		KeyUsage:      int(crt.KeyUsage),
		PublicKey:     crt.PublicKeyAlgorithm.String(),
		SignatureAlg:  crt.SignatureAlgorithm.String(),
		ValidForHours: int64(crt.NotAfter.Sub(crt.NotBefore).Round(time.Hour) / time.Hour),
		DNSNames:      crt.DNSNames,
		ExtKeyUsage:   []int{},
	}

	for _, usage := range crt.ExtKeyUsage {
		facts.ExtKeyUsage = append(facts.ExtKeyUsage, int(usage))
	}

	if keyBlock, _ := pem.Decode(keyPEM); keyBlock != nil {
		facts.KeyPEMType = keyBlock.Type
		facts.KeyMatches = keyMatches(crt, keyBlock)
	}

	return facts, nil
}
