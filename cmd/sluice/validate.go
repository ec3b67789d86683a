package main

import (
	"fmt"
	"io"

	"github.com/sluicehq/sluice/policy"
)

// runValidate loads every file and reports on each: exit status 1 if any
// does not load.
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", stderr)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "sluice validate: no file: sluice validate FILE...")
		return exitUsage
	}
	code := exitOK
	for _, path := range fs.Args() {
		cfg, err := policy.LoadFile(path)
		if err != nil {
			// A *policy.ConfigError reads "FILE:LINE:COLUMN: field: message".
			fmt.Fprintln(stderr, err)
			code = exitError
			continue
		}
		fmt.Fprintf(stdout, "%s: ok: %s\n", path, summary(cfg))
	}
	return code
}

// summary describes a loaded configuration in one line.
func summary(cfg policy.Config) string {
	rules := fmt.Sprintf("%d rule", len(cfg.Rules))
	if len(cfg.Rules) != 1 {
		rules += "s"
	}
	if cfg.Format == policy.FormatEnvoy {
		return fmt.Sprintf("envoy configuration, domain %q, %d top-level descriptors, %s", cfg.Domain, len(cfg.Descriptors), rules)
	}
	return fmt.Sprintf("%s configuration, %s", cfg.Format, rules)
}
