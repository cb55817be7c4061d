// Package config loads the configuration of Harvest's services: a YAML file
// (see configs/), then HARVEST_* environment variables over it. Every
// field has a documented default, so an empty file is valid.
//
// It only reads and validates: it opens no connection and starts nothing;
// internal/service turns a Config into running services.
package config
