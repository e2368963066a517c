// Command gen_resource_types writes modules/tasks/src/shared/resource_types/table.rs: every COSI
// resource type Talos's machined registers, at each release in `releases`, with the names
// `talosctl get` accepts for it, its default namespace, the releases that define it, the
// releases whose definition marks it sensitive (`Sensitivity: meta.Sensitive`), and the file
// that defines it.
//
// The facts come from upstream's own code, in the Go module cache. For each release it reads
// the list machined registers (internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go in
// github.com/siderolabs/talos@vX) and each entry's ResourceDefinition literal (in
// github.com/siderolabs/talos/pkg/machinery@vX, source.go), and fills each definition in with
// cosi-project/runtime's own meta.NewResourceDefinition, as a node's registry does: that is
// where the aliases come from. For each release with a go.vX.mod here it also builds ./dump
// against that release's machinery and requires the compiled definitions to be exactly the ones
// read from the source. v1.14.1 has no go.v1.14.1.mod: its machinery needs
// cosi-project/runtime v1.16.3, which the module proxy here does not serve; its definitions
// are read from the source only, and filled in with cosi-project/runtime v1.14.1 (this
// program's), whose meta package is the same as v1.16.2's.
//
// Usage, from this directory:
//
//	go run .              # rewrite ../../modules/tasks/src/shared/resource_types/table.rs
//	go run . -o -         # print it instead (the cargo test compares this with the file)
//	go run . -update      # re-resolve each go.vX.mod and its sums first (needs the proxy)
//
// Without -update it needs nothing but the module cache (GOPROXY=off works once the modules
// are there). A new release: add it to `releases` (and a go.vX.mod if the proxy can build it).
package main

import (
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

//go:embed dump/main.go
var dumpSource string

const (
	machinery = "github.com/siderolabs/talos/pkg/machinery"
	tableFile = "../../modules/tasks/src/shared/resource_types/table.rs"
)

// definition is one type as ./dump prints it.
type definition struct {
	Type             string   `json:"type"`
	DefaultNamespace string   `json:"default_namespace"`
	Aliases          []string `json:"aliases"`
	Sensitive        bool     `json:"sensitive"`
	Source           string   `json:"source"`
}

type dump struct {
	Machinery   string       `json:"machinery"`
	CosiRuntime string       `json:"cosi_runtime"`
	Definitions []definition `json:"definitions"`
}

// releases are the Talos releases the table is read from, oldest first.
var releases = []string{"v1.13.9", "v1.14.1"}

type release struct {
	version     string
	required    string // the cosi-project/runtime its machinery requires
	cosi        string // the one the compiled check was built with; "" if not built
	definitions []definition
}

func main() {
	out := flag.String("o", tableFile, "where to write the table (- for stdout)")
	update := flag.Bool("update", false, "re-resolve each release's module file and sums with go mod tidy")
	flag.Parse()

	var read []release

	for _, version := range releases {
		r, err := readFromSource(version)
		if err != nil {
			fail(fmt.Sprintf("%s: %v", version, err))
		}

		modFile := "go." + version + ".mod"
		if _, err := os.Stat(modFile); err == nil {
			compiled, err := dumpRelease(modFile, version, *update)
			if err != nil {
				fail(fmt.Sprintf("%s: %v", modFile, err))
			}

			if err := sameDefinitions(r.definitions, compiled.Definitions); err != nil {
				fail(fmt.Sprintf("%s: the source and the compiled code disagree: %v", version, err))
			}

			if compiled.CosiRuntime != r.required {
				fail(fmt.Sprintf("%s: built with cosi-project/runtime %s, but machinery requires %s", version, compiled.CosiRuntime, r.required))
			}

			r.cosi = compiled.CosiRuntime
		}

		read = append(read, r)
	}

	table, err := render(read)
	if err != nil {
		fail(err.Error())
	}

	if *out == "-" {
		fmt.Print(table)

		return
	}

	if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
		fail(err.Error())
	}
}

// readFromSource reads a release's definitions from the module cache.
func readFromSource(version string) (release, error) {
	talosDir, err := moduleDir(".", "github.com/siderolabs/talos@"+version)
	if err != nil {
		return release{}, err
	}

	machineryDir, err := moduleDir(".", machinery+"@"+version)
	if err != nil {
		return release{}, err
	}

	defs, err := readRelease(talosDir, machineryDir)
	if err != nil {
		return release{}, err
	}

	cosi, err := cosiRequired(machineryDir)
	if err != nil {
		return release{}, err
	}

	return release{version: version, required: cosi, definitions: defs}, nil
}

// moduleDir is where a module version's source is, fetched into the module cache if the proxy
// may be asked (GOPROXY=off: only what the cache holds).
func moduleDir(dir, module string) (string, error) {
	// On failure `go mod download -json` still prints the module, with the reason in Error.
	text, err := goCmd(dir, "mod", "download", "-json", module)

	var mod struct{ Dir, Error string }
	if jsonErr := json.Unmarshal([]byte(text), &mod); jsonErr != nil && err == nil {
		return "", jsonErr
	}

	if mod.Dir == "" {
		return "", fmt.Errorf("%s is not in the module cache: %s (%v)", module, mod.Error, err)
	}

	return mod.Dir, nil
}

// cosiRequired is the cosi-project/runtime version a machinery go.mod requires.
func cosiRequired(machineryDir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(machineryDir, "go.mod"))
	if err != nil {
		return "", err
	}

	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "github.com/cosi-project/runtime" {
			return fields[1], nil
		}
	}

	return "", fmt.Errorf("%s/go.mod requires no cosi-project/runtime", machineryDir)
}

// sameDefinitions compares the source's reading with the compiled dump's, type by type.
func sameDefinitions(source, compiled []definition) error {
	key := func(d definition) string {
		return fmt.Sprintf("%s default_namespace=%s aliases=%v sensitive=%v", d.Type, d.DefaultNamespace, d.Aliases, d.Sensitive)
	}

	var a, b []string
	for _, d := range source {
		a = append(a, key(d))
	}

	for _, d := range compiled {
		b = append(b, key(d))
	}

	sort.Strings(a)
	sort.Strings(b)

	if strings.Join(a, "\n") == strings.Join(b, "\n") {
		return nil
	}

	inB := map[string]bool{}
	for _, x := range b {
		inB[x] = true
	}

	inA := map[string]bool{}
	for _, x := range a {
		inA[x] = true
	}

	var diff []string

	for _, x := range a {
		if !inB[x] {
			diff = append(diff, "source only: "+x)
		}
	}

	for _, x := range b {
		if !inA[x] {
			diff = append(diff, "compiled only: "+x)
		}
	}

	return fmt.Errorf("\n%s", strings.Join(diff, "\n"))
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "gen_resource_types:", msg)
	os.Exit(1)
}

// dumpRelease builds ./dump in a scratch module made of the release's module file and sums,
// with a registered.go listing what that release's machined registers, and runs it.
func dumpRelease(modFile, version string, update bool) (dump, error) {
	var d dump

	sumFile := strings.TrimSuffix(modFile, ".mod") + ".sum"

	dir, err := os.MkdirTemp("", "gen_resource_types-")
	if err != nil {
		return d, err
	}
	defer os.RemoveAll(dir)

	if err := copyFile(modFile, filepath.Join(dir, "go.mod")); err != nil {
		return d, err
	}

	if err := copyFile(sumFile, filepath.Join(dir, "go.sum")); err != nil && !(update && os.IsNotExist(err)) {
		return d, err
	}

	// The scratch module builds the dump: the `ignore` constraint keeps it out of this module only.
	main := strings.Replace(dumpSource, "//go:build ignore\n", "", 1)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644); err != nil {
		return d, err
	}

	mode := "-mod=readonly"
	if update {
		mode = "-mod=mod"
	}

	if err := writeRegistered(dir, version); err != nil {
		return d, err
	}

	if update {
		if _, err := goCmd(dir, "mod", "tidy"); err != nil {
			return d, err
		}

		if err := copyFile(filepath.Join(dir, "go.mod"), modFile); err != nil {
			return d, err
		}

		if err := copyFile(filepath.Join(dir, "go.sum"), sumFile); err != nil {
			return d, err
		}
	}

	text, err := goCmd(dir, "run", "-trimpath", mode, ".")
	if err != nil {
		return d, err
	}

	if err := json.Unmarshal([]byte(text), &d); err != nil {
		return d, fmt.Errorf("the dump's output: %w", err)
	}

	if d.Machinery != version {
		return d, fmt.Errorf("it builds machinery %s, not %s", d.Machinery, version)
	}

	return d, nil
}

// writeRegistered copies the resources machined's NewState registers, element by element, from
// the release's own source into registered.go: `var registered = []meta.ResourceWithRD{...}`,
// with the imports those elements use.
func writeRegistered(dir, release string) error {
	talosDir, err := moduleDir(dir, "github.com/siderolabs/talos@"+release)
	if err != nil {
		return err
	}

	path := filepath.Join(talosDir, stateFile)
	fset := token.NewFileSet()

	file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return err
	}

	imports := importNames(file)

	var (
		elements []string
		used     = map[string]bool{"meta": true}
	)

	ast.Inspect(file, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok || !isSelector(sliceElem(lit.Type), "meta", "ResourceWithRD") {
			return true
		}

		for _, elt := range lit.Elts {
			var b strings.Builder
			if err := printer.Fprint(&b, fset, elt); err != nil {
				return false
			}

			elements = append(elements, b.String())

			ast.Inspect(elt, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if pkg, ok := sel.X.(*ast.Ident); ok {
						used[pkg.Name] = true
					}
				}

				return true
			})
		}

		return false
	})

	if len(elements) == 0 {
		return fmt.Errorf("%s: no []meta.ResourceWithRD list found", path)
	}

	names := make([]string, 0, len(used))
	for name := range used {
		if imports[name] == "" {
			return fmt.Errorf("%s: %s is not imported", path, name)
		}

		names = append(names, name)
	}

	sort.Strings(names)

	var b strings.Builder

	fmt.Fprintf(&b, "package main\n\n// Copied from github.com/siderolabs/talos@%s %s (NewState).\n\nimport (\n", release, stateFile)

	for _, name := range names {
		fmt.Fprintf(&b, "\t%s %q\n", name, imports[name])
	}

	b.WriteString(")\n\nvar registered = []meta.ResourceWithRD{\n")

	for _, e := range elements {
		fmt.Fprintf(&b, "\t%s,\n", e)
	}

	b.WriteString("}\n")

	return os.WriteFile(filepath.Join(dir, "registered.go"), []byte(b.String()), 0o644)
}

func goCmd(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr

	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}

	return string(out), nil
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}

	return os.WriteFile(to, data, 0o644)
}

// merged is one type across the releases.
type merged struct {
	name             string
	defaultNamespace string
	aliases          map[string]bool
	definedIn        []string
	sensitiveIn      []string
	sources          map[string][]string // file -> releases
}

func render(read []release) (string, error) {
	byType := map[string]*merged{}

	var versions, how []string

	for _, d := range read {
		versions = append(versions, d.version)

		checked := "read from the source, not built: the proxy does not serve its dependencies"
		if d.cosi != "" {
			checked = "read from the source and checked against the compiled code"
		}

		how = append(how, fmt.Sprintf("// - %s: %s (it requires cosi-project/runtime %s)", d.version, checked, d.required))

		for _, def := range d.definitions {
			m := byType[def.Type]
			if m == nil {
				m = &merged{name: def.Type, defaultNamespace: def.DefaultNamespace, aliases: map[string]bool{}, sources: map[string][]string{}}
				byType[def.Type] = m
			}

			if m.defaultNamespace != def.DefaultNamespace {
				return "", fmt.Errorf("%s: default namespace %q in one release, %q in %s: the table has one column for it", def.Type, m.defaultNamespace, def.DefaultNamespace, d.version)
			}

			for _, a := range def.Aliases {
				m.aliases[a] = true
			}

			m.definedIn = append(m.definedIn, d.version)
			if def.Sensitive {
				m.sensitiveIn = append(m.sensitiveIn, d.version)
			}

			m.sources[def.Source] = append(m.sources[def.Source], d.version)
		}
	}

	names := make([]string, 0, len(byType))
	for name := range byType {
		names = append(names, name)
	}

	sort.Strings(names)

	var b strings.Builder

	fmt.Fprintf(&b, `// @generated by tools/gen_resource_types from upstream's own resource definitions: the
// resources machined registers (github.com/siderolabs/talos internal/app/machined/pkg/runtime/
// v1alpha2/v1alpha2_state.go) and each one's ResourceDefinition in pkg/machinery/resources,
// filled in by cosi-project/runtime's meta.NewResourceDefinition as a node fills it.
%s
// Do not edit by hand. Regenerate: cd tools/gen_resource_types && go run .
// resource_types::tests checks this file is what the generator writes when Go and the modules
// are there.

use super::ResourceType;

/// The releases this table was read from, oldest first.
pub(super) const UPSTREAM: &[&str] = &[%s];

/// Every resource type those releases register, by name.
#[rustfmt::skip]
pub(super) const TYPES: &[ResourceType] = &[
`, strings.Join(how, "\n"), quoteList(versions))

	for _, name := range names {
		m := byType[name]

		aliases := make([]string, 0, len(m.aliases))
		for a := range m.aliases {
			aliases = append(aliases, a)
		}

		sort.Strings(aliases)

		fmt.Fprintf(&b, "    ResourceType {\n")
		fmt.Fprintf(&b, "        name: %q,\n", m.name)
		fmt.Fprintf(&b, "        default_namespace: %q,\n", m.defaultNamespace)
		fmt.Fprintf(&b, "        aliases: &[%s],\n", quoteList(aliases))
		fmt.Fprintf(&b, "        defined_in: &[%s],\n", quoteList(m.definedIn))
		fmt.Fprintf(&b, "        sensitive_in: &[%s],\n", quoteList(m.sensitiveIn))
		fmt.Fprintf(&b, "        source: %q,\n", source(m.sources, versions))
		fmt.Fprintf(&b, "    },\n")
	}

	b.WriteString("];\n")

	return b.String(), nil
}

// source is the file defining the type, with the releases named only when it moved.
func source(sources map[string][]string, releases []string) string {
	if len(sources) == 1 {
		for file := range sources {
			return file
		}
	}

	var parts []string

	for _, r := range releases {
		for file, in := range sources {
			for _, x := range in {
				if x == r {
					parts = append(parts, file+" @ "+r)
				}
			}
		}
	}

	return strings.Join(parts, ", ")
}

func quoteList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = fmt.Sprintf("%q", s)
	}

	return strings.Join(quoted, ", ")
}
