//go:build talos113

package main

import (
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// machineryVersion is the machinery release this build links (go.v1.13.9.mod).
const machineryVersion = "v1.13.9"

// cniOption: up to 1.13 generate takes any CNI config
// (pkg/machinery/config/generate/options.go WithClusterCNIConfig @ v1.13.9).
func cniOption(cni *cniChoice) (generate.Option, error) {
	return generate.WithClusterCNIConfig(&v1alpha1.CNIConfig{CNIName: cni.Name, CNIUrls: cni.URLs}), nil
}

func bundleFromConfig(clock secrets.Clock, cfg config.Provider) (*secrets.Bundle, error) {
	return secrets.NewBundleFromConfig(clock, cfg), nil
}

// validateBundle: v1.13.9's Bundle.Validate checks without a contract.
func validateBundle(bundle *secrets.Bundle, _ *config.VersionContract) error {
	return bundle.Validate()
}
