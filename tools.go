//go:build tools

// Package main pins dependencies that later packages use, so go mod tidy keeps them.
package main

import (
	_ "github.com/expr-lang/expr"
	_ "github.com/gorilla/websocket"
	_ "github.com/stretchr/testify/require"
	_ "github.com/wailsapp/wails/v2"
	_ "gopkg.in/yaml.v3"
	_ "modernc.org/sqlite"
)
