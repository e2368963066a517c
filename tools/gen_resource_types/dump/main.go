//go:build ignore

// Command dump prints, as JSON, the resource definition of every COSI resource type machined
// registers in one release of Talos, from the compiled code: each type's own ResourceDefinition
// method, filled in by cosi-project/runtime's meta.NewResourceDefinition exactly as the
// resource registry fills it on a node (pkg/state/registry/resource.go Register).
//
// The generator in the parent directory builds it for each release it has a go.vX.Y.Z.mod for,
// in a scratch module made of that module file and its sums, this file, and a registered.go
// holding `registered`: the resources that release's machined registers, copied element by
// element from internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go (NewState). What it
// prints is the check on the generator's reading of the same definitions from the source.
// The `ignore` constraint keeps this file out of the generator's own build.
package main

import (
	"encoding/json"
	"os"
	"runtime/debug"
	"sort"

	"github.com/cosi-project/runtime/pkg/resource/meta"
)

type definition struct {
	Type             string   `json:"type"`
	DefaultNamespace string   `json:"default_namespace"`
	Aliases          []string `json:"aliases"`
	Sensitive        bool     `json:"sensitive"`
}

type dump struct {
	Machinery   string       `json:"machinery"`
	CosiRuntime string       `json:"cosi_runtime"`
	Definitions []definition `json:"definitions"`
}

func main() {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		panic("no build info: build in module mode")
	}

	var out dump

	for _, dep := range info.Deps {
		switch dep.Path {
		case "github.com/siderolabs/talos/pkg/machinery":
			out.Machinery = dep.Version
		case "github.com/cosi-project/runtime":
			out.CosiRuntime = dep.Version
		}
	}

	// The two types every COSI state registers before Talos's own (registry.RegisterDefault).
	all := append([]meta.ResourceWithRD{&meta.ResourceDefinition{}, &meta.Namespace{}}, registered...)

	for _, r := range all {
		rd, err := meta.NewResourceDefinition(r.ResourceDefinition())
		if err != nil {
			panic(err)
		}

		spec := rd.TypedSpec()

		aliases := append([]string{}, spec.AllAliases...)
		sort.Strings(aliases)

		out.Definitions = append(out.Definitions, definition{
			Type:             spec.Type,
			DefaultNamespace: spec.DefaultNamespace,
			Aliases:          aliases,
			Sensitive:        spec.Sensitivity == meta.Sensitive,
		})
	}

	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")

	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
