// gitops-health evaluates Kubernetes objects the way GitOps tools judge their health, with
// those tools' own code:
//
//	gitops-health argo [-o json] [-key group/Kind] [-open-libs] HEALTH_LUA OBJECT_FILE...
//	gitops-health argo-test DIR
//	gitops-health kstatus [-o json] OBJECT_FILE...
//	gitops-health json OBJECT_FILE...
//	gitops-health version
//
// argo runs an Argo CD Lua health check through Argo CD's own evaluation
// (github.com/argoproj/argo-cd/v3/util/lua behind gitops-engine's health.GetResourceHealth,
// as the application controller does for a check installed in argocd-cm). argo-test runs a
// check's health_test.yaml in the layout of Argo CD's resource_customizations directory, as
// Argo CD's TestLuaHealthScript does. kstatus prints what kstatus' Compute (Flux's
// github.com/fluxcd/cli-utils) says.
//
// An OBJECT_FILE holds YAML or JSON: one object, several separated by `---`, or a List
// (such as `kubectl get -o yaml` prints).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// source identifies the tool's own source (tools/testbins.sh stamps a hash of it).
var source = "dev"

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "argo":
		err = argoCmd(args)
	case "argo-test":
		err = argoTestCmd(args)
	case "kstatus":
		err = kstatusCmd(args)
	case "json":
		err = jsonCmd(args)
	case "version", "--version":
		fmt.Println(version())
	case "help", "-h", "--help":
		usage(os.Stdout)
	default:
		fmt.Fprintf(os.Stderr, "gitops-health: unknown command %q\n", cmd)
		usage(os.Stderr)
		os.Exit(2)
	}
	var usageErr usageError
	switch {
	case errors.As(err, &usageErr):
		fmt.Fprintf(os.Stderr, "gitops-health: %v\n", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "gitops-health: %v\n", err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  gitops-health argo [-o json] [-key group/Kind] [-open-libs] HEALTH_LUA OBJECT_FILE...
      Argo CD's health of each object with the Lua check HEALTH_LUA installed for
      group/Kind (default: from HEALTH_LUA's path, <group>/<Kind>/health.lua), as the
      application controller assesses it.
  gitops-health argo-test DIR
      Runs DIR/health_test.yaml (Argo CD's resource_customizations format) against
      DIR/health.lua; exits 1 on any mismatch.
  gitops-health kstatus [-o json] OBJECT_FILE...
      kstatus' status of each object (Compute, as Flux and cli-utils use it).
  gitops-health json OBJECT_FILE...
      Prints each object as read, one JSON line each.
  gitops-health version
`)
}

type usageError struct{ error }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// result is one object's verdict.
type result struct {
	File    string `json:"file"`
	Index   int    `json:"index"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

// printer writes results as text (`file[#index] kind/name: Status: message`) or JSON lines.
type printer struct {
	json bool
	out  io.Writer
}

func newPrinter(format string) (printer, error) {
	switch format {
	case "", "text":
		return printer{out: os.Stdout}, nil
	case "json":
		return printer{json: true, out: os.Stdout}, nil
	}
	return printer{}, usagef("-o: want text or json, got %q", format)
}

func (p printer) print(r result) error {
	if p.json {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.out, "%s\n", line)
		return err
	}
	where := r.File
	if r.Index > 0 {
		where = fmt.Sprintf("%s#%d", r.File, r.Index)
	}
	status := r.Status
	if status == "" {
		status = "(none)"
	}
	_, err := fmt.Fprintf(p.out, "%s %s/%s: %s: %s\n", where, r.Kind, r.Name, status, r.Message)
	return err
}

func flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return usagef("%s: %v", fs.Name(), err)
	}
	return nil
}

// version names the tool's source and the upstream modules that judge health.
func version() string {
	var mods []string
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			switch d.Path {
			case "github.com/argoproj/argo-cd/v3", "github.com/argoproj/argo-cd/gitops-engine",
				"github.com/yuin/gopher-lua", "github.com/fluxcd/cli-utils":
				v := d.Version
				if d.Replace != nil {
					v = d.Replace.Version
				}
				mods = append(mods, d.Path+"@"+v)
			}
		}
	}
	return fmt.Sprintf("gitops-health %s (%s)", source, strings.Join(mods, ", "))
}
