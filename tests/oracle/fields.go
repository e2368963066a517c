package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// v1alpha1Fields lists every field of the v1alpha1 document by its YAML path (`.machine.kubelet.image`)
// and says which ones upstream's Go types mark `Deprecated:`. It reads the source of the
// machinery module this program links (req.Source, the module's directory in the Go module cache):
// Go keeps no comments at run time, and the comment is where upstream says a field is deprecated
// (the v1.14 docs generator drops such fields from the JSON schema, `docgen:nodoc`).
func v1alpha1Fields(req request) response {
	if req.Source == "" {
		return response{"error": "oracle: v1alpha1_fields needs \"source\", the machinery module's directory"}
	}

	dir := filepath.Join(req.Source, "config", "types", "v1alpha1")
	structs, err := parseStructs(dir)
	if err != nil {
		return failure(err)
	}

	if _, ok := structs["Config"]; !ok {
		return response{"error": fmt.Sprintf("oracle: no type Config in %s", dir)}
	}

	// The comments say which fields are deprecated; reflection says which fields there are,
	// including those of other packages' types (`.cluster.ca.crt`), which the comments' walk
	// does not enter.
	deprecated := map[string]bool{}

	walkStruct(structs, "Config", "", nil, func(path string, isDeprecated bool) {
		deprecated[path] = isDeprecated
	})

	paths := []string{}
	walkYAMLFields(reflect.TypeFor[v1alpha1.Config](), "", "", 0, func(path string, _ reflect.StructField) {
		paths = append(paths, path)
	})

	fields := []response{}

	for _, path := range paths {
		isDeprecated, read := deprecated[path]
		if read {
			delete(deprecated, path)
		}

		fields = append(fields, response{"path": path, "deprecated": isDeprecated})
	}

	if len(deprecated) > 0 {
		return response{"error": fmt.Sprintf("oracle: fields in the source that reflection does not see: %v", deprecated)}
	}

	return response{"fields": fields}
}

// walkYAMLFields calls visit with the YAML path (`prefix.key`) and the field of every field
// under t, through pointers and lists (no path segment: upstream's messages name
// `.machine.kernel.modules.name`) and map values (mapSegment: "" or ".*").
func walkYAMLFields(t reflect.Type, prefix, mapSegment string, depth int, visit func(string, reflect.StructField)) {
	if depth > 20 {
		return
	}

	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		if t.Kind() == reflect.Map {
			prefix += mapSegment
		}

		t = t.Elem()
	}

	if t.Kind() != reflect.Struct {
		return
	}

	for i := range t.NumField() {
		field := t.Field(i)
		if !field.IsExported() {
			continue
		}

		parts := strings.Split(field.Tag.Get("yaml"), ",")
		key := parts[0]

		if key == "-" {
			continue
		}

		if slices.Contains(parts[1:], "inline") || (field.Anonymous && key == "") {
			walkYAMLFields(field.Type, prefix, mapSegment, depth+1, visit)

			continue
		}

		if key == "" {
			key = strings.ToLower(field.Name)
		}

		visit(prefix+"."+key, field)
		walkYAMLFields(field.Type, prefix+"."+key, mapSegment, depth+1, visit)
	}
}

// parseStructs maps each struct type declared in the package's non-test files to its definition.
func parseStructs(dir string) (map[string]*ast.StructType, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}

	sort.Strings(files)

	structs := map[string]*ast.StructType{}
	fset := token.NewFileSet()

	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}

		file, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}

		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}

			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = st
				}
			}
		}
	}

	return structs, nil
}

// walkStruct calls visit for each YAML-visible field of the struct `name`, then descends into the
// package's own struct types (through pointers, slices and map values). `seen` guards against
// recursive types.
func walkStruct(structs map[string]*ast.StructType, name, prefix string, seen []string, visit func(string, bool)) {
	for _, s := range seen {
		if s == name {
			return
		}
	}

	seen = append(seen, name)

	for _, field := range structs[name].Fields.List {
		key, inline := yamlKey(field)
		if key == "-" {
			continue
		}

		element := elementType(field.Type)

		if inline || len(field.Names) == 0 {
			if _, ok := structs[element]; ok {
				walkStruct(structs, element, prefix, seen, visit)
			}

			continue
		}

		if !field.Names[0].IsExported() || key == "" {
			continue
		}

		path := prefix + "." + key
		visit(path, isDeprecated(field.Doc))

		if _, ok := structs[element]; ok {
			walkStruct(structs, element, path, seen, visit)
		}
	}
}

// yamlKey is the field's key in its `yaml` tag and whether the tag says `inline`.
func yamlKey(field *ast.Field) (string, bool) {
	if field.Tag == nil {
		return "", false
	}

	tag := reflect.StructTag(strings.Trim(field.Tag.Value, "`")).Get("yaml")
	parts := strings.Split(tag, ",")

	for _, option := range parts[1:] {
		if option == "inline" {
			return parts[0], true
		}
	}

	return parts[0], false
}

// elementType is the name of the package-local type a field holds, through `*`, `[]` and map
// values; "" for other packages' types and builtins stay as their name (never a struct here).
func elementType(expr ast.Expr) string {
	for {
		switch t := expr.(type) {
		case *ast.StarExpr:
			expr = t.X
		case *ast.ArrayType:
			expr = t.Elt
		case *ast.MapType:
			expr = t.Value
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// isDeprecated: Go's convention is a paragraph of the doc comment that starts with "Deprecated:".
func isDeprecated(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}

	for _, line := range strings.Split(doc.Text(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "Deprecated:") {
			return true
		}
	}

	return false
}

// mergeReplaceFields lists the fields that upstream's strategic merge replaces instead of merging
// (the `merge:"replace"` struct tag, read by pkg/machinery/config/merge): the v1alpha1 document's
// as `cluster.network.podSubnets`, each other kind's as `Kind.path`. A kind this release cannot
// decode is listed under "refused" with the loader's error. Lists are walked through to their
// items and maps to their values (`.*`), the way the collection's merge names a path.
func mergeReplaceFields(req request) response {
	paths := []string{}
	replaced := func(path string, field reflect.StructField) {
		if slices.Contains(strings.Split(field.Tag.Get("merge"), ","), "replace") {
			paths = append(paths, strings.TrimPrefix(path, "."))
		}
	}

	walkYAMLFields(reflect.TypeFor[v1alpha1.Config](), "", ".*", 0, replaced)

	refused := map[string]string{}

	for _, kind := range req.Kinds {
		header := "apiVersion: v1alpha1\nkind: " + kind + "\n"

		cfg, err := configloader.NewFromBytes([]byte(header))
		if err != nil {
			// Some kinds refuse an empty name while loading (VethConfig: "both configure \"\"").
			cfg, err = configloader.NewFromBytes([]byte(header + "name: oracle0\n"))
		}

		if err != nil {
			refused[kind] = err.Error()

			continue
		}

		for _, doc := range cfg.Documents() {
			walkYAMLFields(reflect.TypeOf(doc), kind, ".*", 0, replaced)
		}
	}

	sort.Strings(paths)

	return response{"replace": paths, "refused": refused}
}
