package main

// Reading one release's resource definitions from its Go source: the list machined registers
// (internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go NewState), and for each entry
// the `meta.ResourceDefinitionSpec{...}` literal its ResourceDefinition method returns, in
// github.com/siderolabs/talos/pkg/machinery/resources/<package>. Only the fields that decide
// how a type is named and who may read it are read (Type, Aliases, DefaultNamespace,
// SkipAutomaticAliases, Sensitivity); any form of them this reader does not know is an error,
// never a guess.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource/meta"
)

// stateFile is where machined lists the resources it registers (NewState).
const stateFile = "internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go"

// goPackage is one parsed Go package of the source tree.
type goPackage struct {
	dir   string // relative to the module: resources/k8s
	files map[string]*ast.File
}

type sourceReader struct {
	machineryDir string
	packages     map[string]*goPackage // by import path
}

// readRelease reads what machined registers in one release, each type's definition filled in by
// cosi-project/runtime's own meta.NewResourceDefinition as the node's registry fills it.
func readRelease(talosDir, machineryDir string) ([]definition, error) {
	registered, err := registeredResources(filepath.Join(talosDir, stateFile))
	if err != nil {
		return nil, err
	}

	r := &sourceReader{machineryDir: machineryDir, packages: map[string]*goPackage{}}

	var out []definition

	for _, reg := range registered {
		spec, file, err := r.definition(reg.importPath, reg.name)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", reg.importPath, reg.name, err)
		}

		def, err := filled(spec, "pkg/machinery/"+file)
		if err != nil {
			return nil, err
		}

		out = append(out, def)
	}

	return append(out, cosiDefaults()...), nil
}

// cosiDefaults are the two types every COSI state registers before Talos's own
// (pkg/state/registry/resource.go RegisterDefault), as the cosi-project/runtime this program is
// built with defines them.
func cosiDefaults() []definition {
	var out []definition

	for _, d := range []struct {
		provider meta.ResourceDefinitionProvider
		file     string
	}{
		{&meta.ResourceDefinition{}, "resource_definition.go"},
		{&meta.Namespace{}, "namespace.go"},
	} {
		def, err := filled(d.provider.ResourceDefinition(), "cosi-project/runtime pkg/resource/meta/"+d.file)
		if err != nil {
			fail(err.Error())
		}

		out = append(out, def)
	}

	return out
}

func filled(spec meta.ResourceDefinitionSpec, source string) (definition, error) {
	rd, err := meta.NewResourceDefinition(spec)
	if err != nil {
		return definition{}, err
	}

	s := rd.TypedSpec()

	aliases := append([]string{}, s.AllAliases...)
	sort.Strings(aliases)

	return definition{
		Type:             s.Type,
		DefaultNamespace: s.DefaultNamespace,
		Aliases:          aliases,
		Sensitive:        s.Sensitivity == meta.Sensitive,
		Source:           source,
	}, nil
}

type registeredResource struct {
	importPath string
	name       string // the Go type, such as Identity
}

// registeredResources reads the `[]meta.ResourceWithRD{&pkg.Name{}, ...}` literal of NewState.
func registeredResources(path string) ([]registeredResource, error) {
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}

	imports := importNames(file)

	var (
		out  []registeredResource
		bad  error
		seen bool
	)

	ast.Inspect(file, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok || !isSelector(sliceElem(lit.Type), "meta", "ResourceWithRD") {
			return true
		}

		seen = true

		for _, elt := range lit.Elts {
			ref, ok := elt.(*ast.UnaryExpr)
			if ok && ref.Op == token.AND {
				if inner, ok := ref.X.(*ast.CompositeLit); ok && len(inner.Elts) == 0 {
					if sel, ok := inner.Type.(*ast.SelectorExpr); ok {
						if pkg, ok := sel.X.(*ast.Ident); ok && imports[pkg.Name] != "" {
							out = append(out, registeredResource{importPath: imports[pkg.Name], name: sel.Sel.Name})

							continue
						}
					}
				}
			}

			bad = fmt.Errorf("%s: an element of the resource list is not &pkg.Type{}", path)
		}

		return false
	})

	if bad != nil {
		return nil, bad
	}

	if !seen {
		return nil, fmt.Errorf("%s: no []meta.ResourceWithRD list", path)
	}

	return out, nil
}

func sliceElem(e ast.Expr) ast.Expr {
	if arr, ok := e.(*ast.ArrayType); ok && arr.Len == nil {
		return arr.Elt
	}

	return nil
}

func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}

	id, ok := sel.X.(*ast.Ident)

	return ok && id.Name == pkg && sel.Sel.Name == name
}

// importNames maps the name a file uses for each import to its path.
func importNames(file *ast.File) map[string]string {
	out := map[string]string{}

	for _, spec := range file.Imports {
		p, _ := strconv.Unquote(spec.Path.Value)

		name := p[strings.LastIndex(p, "/")+1:]
		if spec.Name != nil {
			name = spec.Name.Name
		}

		out[name] = p
	}

	return out
}

// pkg parses a package of the machinery module by import path.
func (r *sourceReader) pkg(importPath string) (*goPackage, error) {
	if p := r.packages[importPath]; p != nil {
		return p, nil
	}

	rel, ok := strings.CutPrefix(importPath, machinery+"/")
	if !ok {
		return nil, fmt.Errorf("%s is not a package of %s", importPath, machinery)
	}

	entries, err := os.ReadDir(filepath.Join(r.machineryDir, rel))
	if err != nil {
		return nil, err
	}

	p := &goPackage{dir: rel, files: map[string]*ast.File{}}

	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}

		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(r.machineryDir, rel, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}

		p.files[name] = f
	}

	r.packages[importPath] = p

	return p, nil
}

// definition finds the ResourceDefinition method of the Go type `name` (a struct with the
// method, or an alias of typed.Resource[Spec, Extension] whose Extension has it) and reads the
// spec literal it returns.
func (r *sourceReader) definition(importPath, name string) (meta.ResourceDefinitionSpec, string, error) {
	var spec meta.ResourceDefinitionSpec

	p, err := r.pkg(importPath)
	if err != nil {
		return spec, "", err
	}

	receiver := name
	if ext := typedExtension(p, name); ext != "" {
		receiver = ext
	}

	for _, fileName := range sortedKeys(p.files) {
		f := p.files[fileName]

		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "ResourceDefinition" || fn.Recv == nil || receiverName(fn.Recv) != receiver {
				continue
			}

			lit, err := returnedLiteral(fn)
			if err != nil {
				return spec, "", err
			}

			spec, err = r.readSpec(importPath, f, lit)

			return spec, p.dir + "/" + fileName, err
		}
	}

	return spec, "", fmt.Errorf("no ResourceDefinition method on %s in %s", receiver, p.dir)
}

// typedExtension is Extension in `type name = typed.Resource[Spec, Extension]`, else "".
func typedExtension(p *goPackage, name string) string {
	for _, f := range p.files {
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}

			for _, s := range gen.Specs {
				ts := s.(*ast.TypeSpec)
				if ts.Name.Name != name {
					continue
				}

				idx, ok := ts.Type.(*ast.IndexListExpr)
				if !ok || !isSelector(idx.X, "typed", "Resource") || len(idx.Indices) != 2 {
					return ""
				}

				if ext, ok := idx.Indices[1].(*ast.Ident); ok {
					return ext.Name
				}
			}
		}
	}

	return ""
}

func receiverName(recv *ast.FieldList) string {
	if len(recv.List) != 1 {
		return ""
	}

	t := recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}

	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}

	return ""
}

// returnedLiteral is X in a method whose body is `return meta.ResourceDefinitionSpec{X}`.
func returnedLiteral(fn *ast.FuncDecl) (*ast.CompositeLit, error) {
	if fn.Body == nil || len(fn.Body.List) != 1 {
		return nil, fmt.Errorf("%s: the body is not one return statement", fn.Name.Name)
	}

	ret, ok := fn.Body.List[0].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return nil, fmt.Errorf("%s: the body is not one return statement", fn.Name.Name)
	}

	lit, ok := ret.Results[0].(*ast.CompositeLit)
	if !ok || !isSelector(lit.Type, "meta", "ResourceDefinitionSpec") {
		return nil, fmt.Errorf("%s: it does not return a meta.ResourceDefinitionSpec literal", fn.Name.Name)
	}

	return lit, nil
}

func (r *sourceReader) readSpec(importPath string, f *ast.File, lit *ast.CompositeLit) (meta.ResourceDefinitionSpec, error) {
	var spec meta.ResourceDefinitionSpec

	for _, elt := range lit.Elts {
		kv, ok := elt.(*ast.KeyValueExpr)
		if !ok {
			return spec, fmt.Errorf("a field of the spec is not keyed")
		}

		key := kv.Key.(*ast.Ident).Name

		var err error

		switch key {
		case "Type":
			spec.Type, err = r.stringConst(importPath, f, kv.Value)
		case "DefaultNamespace":
			spec.DefaultNamespace, err = r.stringConst(importPath, f, kv.Value)
		case "Aliases":
			spec.Aliases, err = r.stringList(importPath, f, kv.Value)
		case "SkipAutomaticAliases":
			id, ok := kv.Value.(*ast.Ident)
			if !ok || (id.Name != "true" && id.Name != "false") {
				err = fmt.Errorf("SkipAutomaticAliases is not true or false")
			}

			spec.SkipAutomaticAliases = ok && id.Name == "true"
		case "Sensitivity":
			switch {
			case isSelector(kv.Value, "meta", "Sensitive"):
				spec.Sensitivity = meta.Sensitive
			case isSelector(kv.Value, "meta", "NonSensitive"):
				spec.Sensitivity = meta.NonSensitive
			default:
				err = fmt.Errorf("Sensitivity is neither meta.Sensitive nor meta.NonSensitive")
			}
		case "PrintColumns", "DisplayType":
			// How talosctl prints it: no bearing on names or access.
		default:
			err = fmt.Errorf("unknown field %s", key)
		}

		if err != nil {
			return spec, err
		}
	}

	return spec, nil
}

// stringList reads `[]resource.Type{...}` or `[]string{...}` of constants.
func (r *sourceReader) stringList(importPath string, f *ast.File, e ast.Expr) ([]string, error) {
	if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
		return nil, nil
	}

	lit, ok := e.(*ast.CompositeLit)
	if !ok || sliceElem(lit.Type) == nil {
		return nil, fmt.Errorf("Aliases is not a slice literal")
	}

	out := []string{}

	for _, elt := range lit.Elts {
		s, err := r.stringConst(importPath, f, elt)
		if err != nil {
			return nil, err
		}

		out = append(out, s)
	}

	return out, nil
}

// stringConst evaluates a string constant: a literal, a conversion such as
// resource.Type("..."), or a constant of this package or another package of the module.
func (r *sourceReader) stringConst(importPath string, f *ast.File, e ast.Expr) (string, error) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind == token.STRING {
			return strconv.Unquote(v.Value)
		}
	case *ast.CallExpr:
		if len(v.Args) == 1 && (isSelector(v.Fun, "resource", "Type") || isSelector(v.Fun, "resource", "Namespace") || isSelector(v.Fun, "resource", "ID")) {
			return r.stringConst(importPath, f, v.Args[0])
		}
	case *ast.Ident:
		return r.namedConst(importPath, v.Name)
	case *ast.SelectorExpr:
		if pkg, ok := v.X.(*ast.Ident); ok {
			if path := importNames(f)[pkg.Name]; path != "" {
				return r.namedConst(path, v.Sel.Name)
			}
		}
	}

	return "", fmt.Errorf("cannot read a string constant from %T", e)
}

func (r *sourceReader) namedConst(importPath, name string) (string, error) {
	p, err := r.pkg(importPath)
	if err != nil {
		return "", err
	}

	for _, fileName := range sortedKeys(p.files) {
		f := p.files[fileName]

		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}

			for _, s := range gen.Specs {
				vs := s.(*ast.ValueSpec)

				for i, n := range vs.Names {
					if n.Name == name && i < len(vs.Values) {
						return r.stringConst(importPath, f, vs.Values[i])
					}
				}
			}
		}
	}

	return "", fmt.Errorf("no constant %s in %s", name, importPath)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	return keys
}
