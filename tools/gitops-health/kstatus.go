package main

import (
	"fmt"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
)

func kstatusCmd(args []string) error {
	fs := flagSet("kstatus")
	format := fs.String("o", "text", "output: text or json")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		return usagef("kstatus: want OBJECT_FILE...")
	}
	p, err := newPrinter(*format)
	if err != nil {
		return err
	}
	objs, err := readAll(fs.Args())
	if err != nil {
		return err
	}
	for _, o := range objs {
		res, err := status.Compute(o.obj)
		if err != nil {
			return fmt.Errorf("%s: %w", o.file, err)
		}
		if err := p.print(o.result(res.Status.String(), res.Message)); err != nil {
			return err
		}
	}
	return nil
}
