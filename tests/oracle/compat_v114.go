//go:build !talos113

package main

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

// machineryVersion is the machinery release this build links (go.mod).
const machineryVersion = "v1.14.1"

// cniOption: from 1.14 generate takes only a custom CNI's one manifest URL
// (pkg/machinery/config/generate/options.go WithCustomCNIUrl @ v1.14.1); other CNI choices have
// no generate option, so the oracle cannot render them.
func cniOption(cni *cniChoice) (generate.Option, error) {
	if cni.Name == "custom" && len(cni.URLs) == 1 {
		return generate.WithCustomCNIUrl(cni.URLs[0]), nil
	}

	return nil, fmt.Errorf("generate @ %s has no option for CNI %q with %d URLs", machineryVersion, cni.Name, len(cni.URLs))
}

func bundleFromConfig(clock secrets.Clock, cfg config.Provider) (*secrets.Bundle, error) {
	return secrets.NewBundleFromConfig(clock, cfg)
}

func validateBundle(bundle *secrets.Bundle, contract *config.VersionContract) error {
	return bundle.Validate(contract)
}
