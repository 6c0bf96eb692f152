package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// object is one object read from a file, with where it came from.
type object struct {
	file  string
	index int // position among the file's objects, from 0
	obj   *unstructured.Unstructured
}

func (o object) result(status, message string) result {
	return result{
		File:    o.file,
		Index:   o.index,
		Kind:    o.obj.GetKind(),
		Name:    o.obj.GetName(),
		Status:  status,
		Message: message,
	}
}

// readObjects reads the objects of a YAML or JSON file: `---`-separated documents, each an
// object or a List of them. Numbers are decoded as the API machinery decodes a response
// (whole numbers as int64), so that what reads a field as an integer works as it does
// against a cluster.
func readObjects(path string) ([]object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []object
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 0; ; n++ {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, n, err)
		}
		objs, err := decode(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, n, err)
		}
		for _, o := range objs {
			out = append(out, object{file: path, index: len(out), obj: o})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no object", path)
	}
	return out, nil
}

func decode(doc []byte) ([]*unstructured.Unstructured, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	if s := strings.TrimSpace(string(j)); s == "null" || s == "" {
		return nil, nil // an empty document
	}
	var m map[string]any
	if err := utiljson.Unmarshal(j, &m); err != nil {
		return nil, fmt.Errorf("not an object: %w", err)
	}
	u := &unstructured.Unstructured{Object: m}
	if u.IsList() {
		var objs []*unstructured.Unstructured
		err := u.EachListItem(func(item runtime.Object) error {
			i, ok := item.(*unstructured.Unstructured)
			if !ok {
				return fmt.Errorf("list item of type %T", item)
			}
			if err := check(i); err != nil {
				return err
			}
			objs = append(objs, i)
			return nil
		})
		return objs, err
	}
	return []*unstructured.Unstructured{u}, check(u)
}

func check(u *unstructured.Unstructured) error {
	if u.GetAPIVersion() == "" || u.GetKind() == "" {
		return errors.New("an object needs apiVersion and kind")
	}
	return nil
}

// readAll reads the objects of every file, in order.
func readAll(paths []string) ([]object, error) {
	var all []object
	for _, p := range paths {
		objs, err := readObjects(p)
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
	}
	return all, nil
}

// jsonCmd prints the objects as read, one JSON line each.
func jsonCmd(args []string) error {
	if len(args) == 0 {
		return usagef("json: want OBJECT_FILE...")
	}
	objs, err := readAll(args)
	if err != nil {
		return err
	}
	for _, o := range objs {
		line, err := json.Marshal(o.obj.Object)
		if err != nil {
			return err
		}
		fmt.Printf("%s\n", line)
	}
	return nil
}
