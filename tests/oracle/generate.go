package main

import (
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"go.yaml.in/yaml/v4"
)

// generateOptions are the collection's render options (talos_config's, the Rust
// `ferro_talos_config::generate::GenerateOptions` in snake case). Each maps onto one
// `generate.With...` option of upstream's, as `talosctl gen config`'s flags do
// (cmd/talosctl/cmd/mgmt/gen/config.go).
type generateOptions struct {
	Contract                       string            `json:"contract"`
	MachineType                    string            `json:"machine_type"`
	ClusterName                    string            `json:"cluster_name"`
	Endpoint                       string            `json:"endpoint"`
	KubernetesVersion              string            `json:"kubernetes_version"`
	InstallDisk                    *string           `json:"install_disk"`
	InstallImage                   *string           `json:"install_image"`
	AdditionalSANs                 []string          `json:"additional_sans"`
	DNSDomain                      string            `json:"dns_domain"`
	PodSubnets                     []string          `json:"pod_subnets"`
	ServiceSubnets                 []string          `json:"service_subnets"`
	AllowSchedulingOnControlPlanes bool              `json:"allow_scheduling_on_control_planes"`
	LocalAPIServerPort             *int              `json:"local_api_server_port"`
	InstallExtraKernelArgs         []string          `json:"install_extra_kernel_args"`
	Sysctls                        map[string]string `json:"sysctls"`
	CNI                            *cniChoice        `json:"cni"`
	RegistryMirrors                [][2]string       `json:"registry_mirrors"`
	KubeSpan                       bool              `json:"kubespan"`
}

type cniChoice struct {
	Name string   `json:"name"`
	URLs []string `json:"urls"`
}

func loadSecrets(text string) (*secrets.Bundle, error) {
	var bundle secrets.Bundle
	if err := yaml.Unmarshal([]byte(text), &bundle); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}

	return &bundle, nil
}

func contractOf(version string) (*config.VersionContract, error) {
	return config.ParseContractFromVersion("v" + strings.TrimPrefix(version, "v"))
}

// generateConfig renders one machine type's config as `talosctl gen config --config-patch`
// does: the patches applied to the generated config with configpatcher, then the resulting config
// encoded with comments disabled (pkg/machinery/config/bundle/bundle.go ApplyPatches and
// Serialize). For strategic patches that is the stability test's output too; after a JSON 6902
// patch it differs from the patched bytes (`talosctl machineconfig patch`, op "patch").
func generateConfig(req request) response {
	o := req.Options

	bundle, err := loadSecrets(req.Secrets)
	if err != nil {
		return failure(err)
	}

	contract, err := contractOf(o.Contract)
	if err != nil {
		return failure(err)
	}

	opts := []generate.Option{
		generate.WithSecretsBundle(bundle),
		generate.WithVersionContract(contract),
	}

	if o.InstallDisk != nil {
		opts = append(opts, generate.WithInstallDisk(*o.InstallDisk))
	}

	if o.InstallImage != nil {
		opts = append(opts, generate.WithInstallImage(*o.InstallImage))
	}

	if len(o.AdditionalSANs) > 0 {
		opts = append(opts, generate.WithAdditionalSubjectAltNames(o.AdditionalSANs))
	}

	if o.DNSDomain != "" {
		opts = append(opts, generate.WithDNSDomain(o.DNSDomain))
	}

	if o.AllowSchedulingOnControlPlanes {
		opts = append(opts, generate.WithAllowSchedulingOnControlPlanes(true))
	}

	if o.LocalAPIServerPort != nil {
		opts = append(opts, generate.WithLocalAPIServerPort(*o.LocalAPIServerPort))
	}

	if len(o.InstallExtraKernelArgs) > 0 {
		opts = append(opts, generate.WithInstallExtraKernelArgs(o.InstallExtraKernelArgs))
	}

	if len(o.Sysctls) > 0 {
		opts = append(opts, generate.WithSysctls(o.Sysctls))
	}

	if o.CNI != nil {
		cniOpt, err := cniOption(o.CNI)
		if err != nil {
			return response{"unsupported": err.Error()}
		}

		opts = append(opts, cniOpt)
	}

	for _, mirror := range o.RegistryMirrors {
		opts = append(opts, generate.WithRegistryMirror(mirror[0], mirror[1]))
	}

	// talosctl sets it only when --with-kubespan is given (gen/config.go).
	if o.KubeSpan {
		opts = append(opts, generate.WithKubeSpanEnabled(true))
	}

	// talosctl drops a leading "v" (gen/config.go GenerateConfigBundle: KubeVersion).
	in, err := generate.NewInput(o.ClusterName, o.Endpoint, strings.TrimPrefix(o.KubernetesVersion, "v"), opts...)
	if err != nil {
		return failure(err)
	}

	// The subnets have no option of their own: talosctl keeps NewInput's IPv4 defaults, and the
	// collection's option sets these fields of the input.
	if len(o.PodSubnets) > 0 {
		in.PodNet = o.PodSubnets
	}

	if len(o.ServiceSubnets) > 0 {
		in.ServiceNet = o.ServiceSubnets
	}

	machineType, err := machine.ParseType(o.MachineType)
	if err != nil {
		return failure(err)
	}

	cfg, err := in.Config(machineType)
	if err != nil {
		return failure(err)
	}

	out, err := patchAndEncode(cfg, req.Patches)
	if err != nil {
		return withRoundTrip(failure(err), cfg, req.Patches)
	}

	return withRoundTrip(response{"config": out}, cfg, req.Patches)
}

// withRoundTrip adds, for a request with JSON 6902 patches, whether upstream's JSON 6902 path
// keeps the config as it is: configpatcher.JSON6902 converts the YAML to JSON and back with
// ghodss/yaml (yaml.v2, YAML 1.1 rules), which reads `yes` as true and `<<` as a merge key. The
// answer compares the render with each JSON 6902 patch replaced by an empty one (`[]`: the
// round trip alone) with the render without them.
func withRoundTrip(resp response, cfg config.Provider, texts []string) response {
	var (
		emptied, dropped []string
		hasJSON          bool
	)

	for _, text := range texts {
		patch, err := configpatcher.LoadPatch([]byte(text))
		if err != nil {
			return resp
		}

		if _, isStrategic := patch.(configpatcher.StrategicMergePatch); isStrategic {
			emptied = append(emptied, text)
			dropped = append(dropped, text)
		} else {
			hasJSON = true

			emptied = append(emptied, "[]")
		}
	}

	if !hasJSON {
		return resp
	}

	roundTripped, errA := patchAndEncode(cfg, emptied)
	direct, errB := patchAndEncode(cfg, dropped)
	resp["json6902_lossless"] = errA == nil && errB == nil && roundTripped == direct

	return resp
}

func patchAndEncode(cfg config.Provider, texts []string) (string, error) {
	patches, err := loadPatches(texts)
	if err != nil {
		return "", err
	}

	patched, err := configpatcher.Apply(configpatcher.WithConfig(cfg), patches)
	if err != nil {
		return "", err
	}

	result, err := patched.Config()
	if err != nil {
		return "", err
	}

	out, err := result.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))

	return string(out), err
}

func loadPatches(texts []string) ([]configpatcher.Patch, error) {
	patches := make([]configpatcher.Patch, 0, len(texts))

	for _, text := range texts {
		patch, err := configpatcher.LoadPatch([]byte(text))
		if err != nil {
			return nil, err
		}

		patches = append(patches, patch)
	}

	return patches, nil
}

// applyPatches applies inline patches (YAML or a JSON 6902 list) as `talosctl machineconfig
// patch` does, and returns the patched bytes.
func applyPatches(cfg []byte, texts []string) (string, error) {
	if len(texts) == 0 {
		return string(cfg), nil
	}

	patches, err := loadPatches(texts)
	if err != nil {
		return "", err
	}

	patched, err := configpatcher.Apply(configpatcher.WithBytes(cfg), patches)
	if err != nil {
		return "", err
	}

	out, err := patched.Bytes()
	if err != nil {
		return "", err
	}

	return string(out), nil
}

func patchConfig(req request) response {
	out, err := applyPatches([]byte(req.Config), req.Patches)
	if err != nil {
		return failure(err)
	}

	return response{"config": out}
}
