package main

import (
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
)

// loadConfig decodes a config with upstream's strict loader (unknown keys and kinds are errors,
// pkg/machinery/config/configloader) and names the documents it found.
func loadConfig(req request) response {
	cfg, err := configloader.NewFromBytes([]byte(req.Config))
	if err != nil {
		return failure(err)
	}

	kinds := []string{}
	for _, doc := range cfg.Documents() {
		kinds = append(kinds, doc.Kind())
	}

	return response{"kinds": kinds}
}

// reencodeConfig loads a config and encodes it again, comments disabled: what upstream makes of
// the values a text holds. A text upstream wrote reads back as written unless its encoder lost
// something on the way (see modules/config/tests/oracle/mod.rs).
func reencodeConfig(req request) response {
	cfg, err := configloader.NewFromBytes([]byte(req.Config))
	if err != nil {
		return failure(err)
	}

	out, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return failure(err)
	}

	return response{"config": string(out)}
}

// runtimeMode is validation.RuntimeMode for the platforms the tests name. Upstream's own
// implementation lives in an internal package of machined; these are the two facts validation
// asks of it (pkg/machinery/config/validation/runtime_mode.go).
type runtimeMode string

func (m runtimeMode) String() string        { return string(m) }
func (m runtimeMode) RequiresInstall() bool { return m == "metal" }
func (m runtimeMode) InContainer() bool     { return m == "container" }

// validateConfig loads the config, then validates it as `talosctl validate --mode M [--strict]`
// does (cmd/talosctl/cmd/mgmt/validate.go: WithLocal, client-side validation).
func validateConfig(req request) response {
	cfg, err := configloader.NewFromBytes([]byte(req.Config))
	if err != nil {
		return response{"load_error": err.Error()}
	}

	mode := req.Mode
	if mode == "" {
		mode = "metal"
	}

	opts := []validation.Option{validation.WithLocal()}
	if req.Strict {
		opts = append(opts, validation.WithStrict())
	}

	warnings, err := cfg.Validate(runtimeMode(mode), opts...)
	if warnings == nil {
		warnings = []string{}
	}

	resp := response{"warnings": warnings}
	if err != nil {
		resp["error"] = err.Error()
	}

	return resp
}
