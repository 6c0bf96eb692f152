package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/argoproj/argo-cd/gitops-engine/pkg/health"
	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	argolua "github.com/argoproj/argo-cd/v3/util/lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func argoCmd(args []string) error {
	fs := flagSet("argo")
	format := fs.String("o", "text", "output: text or json")
	key := fs.String("key", "", "group/Kind (or argocd-cm's group_Kind) the check is installed for")
	openLibs := fs.Bool("open-libs", false, "as with resource.customizations.useOpenLibs.<group_Kind>: true")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		return usagef("argo: want HEALTH_LUA OBJECT_FILE...")
	}
	p, err := newPrinter(*format)
	if err != nil {
		return err
	}
	overrides, k, err := loadCheck(fs.Arg(0), *key, *openLibs)
	if err != nil {
		return err
	}
	objs, err := readAll(fs.Args()[1:])
	if err != nil {
		return err
	}
	failed := 0
	for _, o := range objs {
		hs, err := controllerHealth(o.obj, overrides)
		if err != nil {
			failed++ // the check broke: Argo CD shows Unknown with the error, as printed
		}
		if hs == nil {
			hs = &health.HealthStatus{Message: fmt.Sprintf(
				"Argo CD assesses no health for %s (the check is installed for %s)",
				argolua.GetConfigMapKey(o.obj.GroupVersionKind()), k)}
		}
		if err := p.print(o.result(string(hs.Status), hs.Message)); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("the health check failed on %d object(s)", failed)
	}
	return nil
}

// loadCheck reads a health.lua and installs it the way argocd-cm's
// resource.customizations.health.<group_Kind> key does.
func loadCheck(path, key string, openLibs bool) (argolua.ResourceHealthOverrides, string, error) {
	script, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	if key == "" {
		key, err = keyFromPath(path)
		if err != nil {
			return nil, "", err
		}
	}
	key, err = overrideKey(key)
	if err != nil {
		return nil, "", err
	}
	return argolua.ResourceHealthOverrides{
		key: appv1.ResourceOverride{HealthLua: string(script), UseOpenLibs: openLibs},
	}, key, nil
}

// keyFromPath is group/Kind of .../<group>/<Kind>/health.lua, the layout of Argo CD's
// resource_customizations directory.
func keyFromPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(abs)
	kind, group := filepath.Base(dir), filepath.Base(filepath.Dir(dir))
	if filepath.Base(abs) != "health.lua" || kind == "" || group == "" || group == string(filepath.Separator) {
		return "", usagef("cannot tell the group and kind from %s (want .../<group>/<Kind>/health.lua); give -key", path)
	}
	return group + "/" + kind, nil
}

// overrideKey accepts group/Kind, or argocd-cm's group_Kind, and gives the key Argo CD
// looks checks up by.
func overrideKey(key string) (string, error) {
	if strings.Contains(key, "/") {
		return key, nil
	}
	switch parts := strings.Split(key, "_"); len(parts) {
	case 2:
		return parts[0] + "/" + parts[1], nil
	case 1:
		if key != "" {
			return key, nil // a kind of the core group
		}
	}
	return "", usagef("-key: want group/Kind or group_Kind, got %q", key)
}

// controllerHealth is the application controller's assessment: gitops-engine's
// GetResourceHealth with the argocd-cm checks as the override.
func controllerHealth(obj *unstructured.Unstructured, overrides argolua.ResourceHealthOverrides) (*health.HealthStatus, error) {
	return health.GetResourceHealth(obj, overrides)
}

// healthTests is a health_test.yaml, the format of Argo CD's resource_customizations.
type healthTests struct {
	Tests []struct {
		InputPath    string              `json:"inputPath"`
		HealthStatus health.HealthStatus `json:"healthStatus"`
	} `json:"tests"`
}

func argoTestCmd(args []string) error {
	fs := flagSet("argo-test")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("argo-test: want DIR (holding health.lua and health_test.yaml)")
	}
	dir := fs.Arg(0)
	overrides, key, err := loadCheck(filepath.Join(dir, "health.lua"), "", false)
	if err != nil {
		return err
	}
	script := overrides[key].HealthLua
	raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
	if err != nil {
		return err
	}
	var suite healthTests
	if err := yaml.UnmarshalStrict(raw, &suite); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, "health_test.yaml"), err)
	}
	if len(suite.Tests) == 0 {
		return fmt.Errorf("%s: no tests", filepath.Join(dir, "health_test.yaml"))
	}

	failures := 0
	fail := func(format string, args ...any) {
		failures++
		fmt.Printf("FAIL "+format+"\n", args...)
	}
	used := map[string]bool{}
	for _, test := range suite.Tests {
		name := test.InputPath
		used[filepath.Clean(name)] = true
		want := test.HealthStatus
		objs, err := readObjects(filepath.Join(dir, name))
		if err != nil {
			fail("%s: %v", name, err)
			continue
		}
		if len(objs) != 1 {
			fail("%s: holds %d objects, want one", name, len(objs))
			continue
		}
		obj := objs[0].obj
		// As Argo CD's TestLuaHealthScript: find the object's check, then run it; here both
		// as argocd-cm runs it (no standard libraries) and as a built-in check runs (all).
		vm := argolua.VM{ResourceOverrides: overrides}
		found, _, err := vm.GetHealthScript(obj)
		if err != nil {
			fail("%s: %v", name, err)
			continue
		}
		if found != script {
			fail("%s: %s is not checked by %s/health.lua (installed for %s)",
				name, argolua.GetConfigMapKey(obj.GroupVersionKind()), dir, key)
			continue
		}
		ok := true
		for _, openLibs := range []bool{false, true} {
			vm.UseOpenLibs = openLibs
			got, err := vm.ExecuteHealthLua(obj, script)
			how := "argocd-cm, no standard libraries"
			if openLibs {
				how = "standard libraries open"
			}
			switch {
			case err != nil:
				fail("%s (%s): the check failed: %v", name, how, err)
				ok = false
			case *got != want:
				fail("%s (%s):\n     want %s: %q\n     got  %s: %q", name, how, want.Status, want.Message, got.Status, got.Message)
				ok = false
			}
		}
		if !ok {
			continue
		}
		fmt.Printf("ok   %s: %s: %s\n", name, want.Status, want.Message)
		if shown, err := controllerHealth(obj, overrides); err == nil && shown != nil && *shown != want {
			fmt.Printf("     (the application controller shows %s: %q without running the check)\n", shown.Status, shown.Message)
		}
	}
	fixtures, err := filepath.Glob(filepath.Join(dir, "testdata", "*"))
	if err != nil {
		return err
	}
	slices.Sort(fixtures)
	for _, f := range fixtures {
		rel, err := filepath.Rel(dir, f)
		if err != nil {
			return err
		}
		if !used[rel] {
			fail("%s: no test in health_test.yaml uses it", rel)
		}
	}
	if failures > 0 {
		return fmt.Errorf("%d failure(s) in %d test(s) of %s", failures, len(suite.Tests), dir)
	}
	fmt.Printf("PASS %d test(s) of %s\n", len(suite.Tests), dir)
	return nil
}
