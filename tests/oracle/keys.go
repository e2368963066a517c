package main

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
)

// keyMatches says whether the PEM private key is the certificate's (Talos writes Ed25519 keys
// as PKCS#8 "ED25519 PRIVATE KEY", ECDSA as SEC 1 "EC PRIVATE KEY", RSA as PKCS#1).
func keyMatches(crt *x509.Certificate, block *pem.Block) bool {
	var (
		key any
		err error
	)

	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}

	if err != nil {
		return false
	}

	signer, ok := key.(crypto.Signer)
	if !ok {
		return false
	}

	public, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })

	return ok && public.Equal(crt.PublicKey)
}
