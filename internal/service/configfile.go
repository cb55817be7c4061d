package service

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/harvest-engine/harvest/internal/config"
)

// EnvConfig names the configuration file when --config does not.
const EnvConfig = "HARVEST_CONFIG"

// configFlag is the flag that names the configuration file.
const configFlag = "config"

// ConfigFile is the configuration file a process read, and what named it.
type ConfigFile struct {
	// Path is the file read, absolute; empty when the process read none.
	Path string
	// NamedBy is what named it: "--config", HARVEST_CONFIG or "default".
	NamedBy string
	// Missing is the default file the process looked for and did not find,
	// absolute; empty when it has no default.
	Missing string
}

// AddConfigFlag adds --config to flags. def is the file read when neither
// --config nor HARVEST_CONFIG names one, if it exists (relative to the
// working directory); empty for none.
func AddConfigFlag(flags *pflag.FlagSet, def string) {
	usage := "YAML configuration file (default $" + EnvConfig + ", else none)"
	if def != "" {
		usage = fmt.Sprintf("YAML configuration file (default $%s, else %s when it exists)", EnvConfig, def)
	}
	flags.String(configFlag, "", usage)
}

// findConfigFile says which file to read: --config, else HARVEST_CONFIG
// (either must exist), else def when it exists.
func findConfigFile(flags *pflag.FlagSet, def string) (ConfigFile, error) {
	named := func(path, by string) (ConfigFile, error) {
		abs, err := filepath.Abs(path)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			return ConfigFile{}, fmt.Errorf("config file %s (%s): %w", path, by, err)
		}
		return ConfigFile{Path: abs, NamedBy: by}, nil
	}
	if fl := flags.Lookup(configFlag); fl != nil && fl.Changed && fl.Value.String() != "" {
		return named(fl.Value.String(), "--"+configFlag)
	}
	if path := os.Getenv(EnvConfig); path != "" {
		return named(path, EnvConfig)
	}
	if def == "" {
		return ConfigFile{}, nil
	}
	abs, err := filepath.Abs(def)
	if err != nil {
		return ConfigFile{}, fmt.Errorf("default config file %s: %w", def, err)
	}
	switch _, err := os.Stat(abs); {
	case err == nil:
		return ConfigFile{Path: abs, NamedBy: "default"}, nil
	case errors.Is(err, fs.ErrNotExist):
		return ConfigFile{Missing: abs}, nil
	default:
		return ConfigFile{}, fmt.Errorf("default config file: %w", err)
	}
}

// LoadConfig loads cmd's configuration: the YAML file --config names
// (else HARVEST_CONFIG, else defaultFile when it exists; see
// AddConfigFlag), the HARVEST_* variables over it, and cmd's configuration
// flags (AddFlags) over those. It builds the logger the configuration
// describes, on cmd's stderr.
func LoadConfig(cmd *cobra.Command, defaultFile string) (config.Config, *slog.Logger, ConfigFile, error) {
	file, err := findConfigFile(cmd.Flags(), defaultFile)
	if err != nil {
		return config.Config{}, nil, file, err
	}
	cfg, err := config.LoadEnv(file.Path, flagEnv(cmd.Flags()))
	if err != nil {
		return cfg, nil, file, err
	}
	return cfg, cfg.Logger(cmd.ErrOrStderr()), file, nil
}

// Log says which file the process read, or that it read none and where
// it looked; withoutFile, when set, is added to the latter to say what
// running without a file means.
func (f ConfigFile) Log(log *slog.Logger, withoutFile string) {
	switch {
	case f.Path != "":
		log.Info("configuration file read", "config_file", f.Path, "named_by", f.NamedBy)
	case f.Missing != "":
		msg := fmt.Sprintf("no configuration file: %s does not exist, and neither --%s nor %s names one; the defaults and HARVEST_* variables apply",
			f.Missing, configFlag, EnvConfig)
		if withoutFile != "" {
			msg += ": " + withoutFile
		}
		log.Warn(msg)
	default:
		msg := fmt.Sprintf("no configuration file: neither --%s nor %s names one; the defaults and HARVEST_* variables apply", configFlag, EnvConfig)
		if withoutFile != "" {
			msg += ": " + withoutFile
		}
		log.Info(msg)
	}
}
