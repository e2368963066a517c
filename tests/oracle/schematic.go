package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"

	"go.yaml.in/yaml/v4"
)

// schematic has the fields, order and tags of Image Factory's schematic
// (pkg/schematic/schematic.go @ image-factory v1.5.0), which is not served by the Go module proxy:
// its ID is the SHA-256 of this struct's yaml.Marshal, so the field order and omitempty are the
// wire facts, and go-yaml (this program's, v4.0.0-rc.6 in go.mod) does the writing. The factory's
// Bootloader is an imageropts.BootloaderKind, which go-yaml writes as its text: a string here.
type schematic struct {
	Owner         string        `yaml:"owner,omitempty"`
	Overlay       overlay       `yaml:"overlay,omitempty"`
	Customization customization `yaml:"customization"`
}

type customization struct {
	EmbeddedMachineConfiguration string                  `yaml:"embeddedMachineConfiguration,omitempty"`
	ExtraKernelArgs              []string                `yaml:"extraKernelArgs,omitempty"`
	Meta                         []metaValue             `yaml:"meta,omitempty"`
	SystemExtensions             systemExtensions        `yaml:"systemExtensions,omitempty"`
	Bootloader                   string                  `yaml:"bootloader,omitempty"`
	SecureBoot                   secureBootCustomization `yaml:"secureboot,omitempty"`
	DiskImage                    diskImageCustomization  `yaml:"diskImage,omitempty"`
}

type metaValue struct {
	Key   uint8  `yaml:"key"`
	Value string `yaml:"value"`
}

type systemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

type overlay struct {
	Image   string         `yaml:"image"`
	Name    string         `yaml:"name"`
	Options map[string]any `yaml:"options,omitempty"`
}

type secureBootCustomization struct {
	EnrollKeys                   string `yaml:"enrollKeys,omitempty"`
	IncludeWellKnownCertificates bool   `yaml:"includeWellKnownCertificates,omitempty"`
}

type diskImageCustomization struct {
	SectorSize uint `yaml:"sectorSize,omitempty"`
}

// canonicalSchematic is the factory's Unmarshal (strict: unknown keys refused) then Marshal and
// ID: the canonical text a schematic is stored and hashed as.
func canonicalSchematic(req request) response {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(req.Config)))
	dec.KnownFields(true)

	var s schematic
	if err := dec.Decode(&s); err != nil {
		return failure(err)
	}

	out, err := yaml.Marshal(&s)
	if err != nil {
		return failure(err)
	}

	id := sha256.Sum256(out)

	return response{"yaml": string(out), "id": hex.EncodeToString(id[:])}
}
