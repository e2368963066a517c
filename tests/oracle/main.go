// Command oracle answers questions about Talos machine configs with upstream's own config library
// (github.com/siderolabs/talos/pkg/machinery, linked at an exact release from the Go module
// proxy), so that our tests can compare the collection and talos-sim with what Talos itself does.
//
// It reads one JSON request per line on stdin and writes one JSON response per line on stdout,
// so a test can keep one process for many thousands of questions. A request names its operation:
//
//	{"op":"version"}
//	{"op":"generate","secrets":YAML,"options":{...},"patches":[YAML...]}
//	{"op":"patch","config":YAML,"patches":[YAML...]}
//	{"op":"load","config":YAML}
//	{"op":"reencode","config":YAML}
//	{"op":"validate","config":YAML,"mode":"metal","strict":true}
//	{"op":"secrets_from_config","config":YAML}
//	{"op":"generate_secrets","contract":"1.14"}
//	{"op":"describe_secrets","secrets":YAML,"contract":"1.14"}
//	{"op":"v1alpha1_fields","source":DIR}
//	{"op":"merge_replace","kinds":[KIND...]}
//	{"op":"node_id","hex":HEX}
//	{"op":"schematic","config":YAML}
//
// Every answer is an object; a failure of the operation itself (upstream refused the input) is
// {"error": TEXT} with upstream's error text, which is what the tests compare.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// request is the union of every operation's inputs; each operation reads the fields it needs.
type request struct {
	Op       string          `json:"op"`
	Config   string          `json:"config"`
	Secrets  string          `json:"secrets"`
	Options  generateOptions `json:"options"`
	Patches  []string        `json:"patches"`
	Mode     string          `json:"mode"`
	Strict   bool            `json:"strict"`
	Contract string          `json:"contract"`
	Source   string          `json:"source"`
	Kinds    []string        `json:"kinds"`
	Hex      string          `json:"hex"`
}

type response map[string]any

func answer(req request) response {
	switch req.Op {
	case "version":
		return response{"machinery": machineryVersion}
	case "generate":
		return generateConfig(req)
	case "patch":
		return patchConfig(req)
	case "load":
		return loadConfig(req)
	case "validate":
		return validateConfig(req)
	case "reencode":
		return reencodeConfig(req)
	case "secrets_from_config":
		return secretsFromConfig(req)
	case "generate_secrets":
		return generateSecrets(req)
	case "describe_secrets":
		return describeSecrets(req)
	case "v1alpha1_fields":
		return v1alpha1Fields(req)
	case "merge_replace":
		return mergeReplaceFields(req)
	case "node_id":
		return encodeNodeID(req)
	case "schematic":
		return canonicalSchematic(req)
	default:
		return response{"error": fmt.Sprintf("oracle: unknown op %q", req.Op)}
	}
}

func failure(err error) response {
	return response{"error": err.Error()}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	// A config with a few documents is far below this; the limit only guards against a runaway.
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)

	out := bufio.NewWriter(os.Stdout)
	encoder := json.NewEncoder(out)

	for in.Scan() {
		var req request

		var resp response

		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			resp = response{"error": "oracle: bad request: " + err.Error()}
		} else {
			resp = safely(req)
		}

		if err := encoder.Encode(resp); err != nil {
			fmt.Fprintln(os.Stderr, "oracle:", err)
			os.Exit(1)
		}

		if err := out.Flush(); err != nil {
			os.Exit(1)
		}
	}

	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "oracle:", err)
		os.Exit(1)
	}
}

// safely turns a panic inside upstream's code into an answer: a panic on some input is itself a
// finding the tests should see, not a dead oracle.
func safely(req request) (resp response) {
	defer func() {
		if r := recover(); r != nil {
			resp = response{"panic": fmt.Sprint(r)}
		}
	}()

	return answer(req)
}
