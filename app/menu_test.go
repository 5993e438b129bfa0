package app

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/wailsapp/wails/v2/pkg/menu"
	"github.com/wailsapp/wails/v2/pkg/menu/keys"
)

func findItemOK(items []*menu.MenuItem, path ...string) bool {
	for _, it := range items {
		if it.Label != path[0] {
			continue
		}
		if len(path) == 1 {
			return true
		}
		if it.SubMenu != nil {
			return findItemOK(it.SubMenu.Items, path[1:]...)
		}
	}
	return false
}

func findItem(t *testing.T, items []*menu.MenuItem, path ...string) *menu.MenuItem {
	t.Helper()
	for _, it := range items {
		if it.Label != path[0] {
			continue
		}
		if len(path) == 1 {
			return it
		}
		require.NotNil(t, it.SubMenu, "%q has no submenu", it.Label)
		return findItem(t, it.SubMenu.Items, path[1:]...)
	}
	t.Fatalf("menu item %v not found", path)
	return nil
}

func labels(items []*menu.MenuItem) []string {
	var out []string
	for _, it := range items {
		if it.Type == menu.SeparatorType {
			out = append(out, "-")
			continue
		}
		out = append(out, it.Label)
	}
	return out
}

func TestBuildMenuLinux(t *testing.T) {
	var got []string
	m := buildMenu("linux", menuActions{
		quit:          func() { got = append(got, "quit") },
		reload:        func() { got = append(got, "reload") },
		openInBrowser: func() { got = append(got, "browser") },
		edit:          func(c EditCommand) { got = append(got, "edit:"+string(c)) },
	})
	require.Equal(t, []string{"File", "Edit", "View"}, labels(m.Items))
	require.Equal(t, []string{"Quit"}, labels(findItem(t, m.Items, "File").SubMenu.Items))
	require.Equal(t, []string{"Undo", "Redo", "-", "Cut", "Copy", "Paste", "-", "Select All"},
		labels(findItem(t, m.Items, "Edit").SubMenu.Items))
	require.Equal(t, []string{"Reload", "Open in Browser"}, labels(findItem(t, m.Items, "View").SubMenu.Items))

	require.Equal(t, keys.CmdOrCtrl("q"), findItem(t, m.Items, "File", "Quit").Accelerator)
	require.Equal(t, keys.CmdOrCtrl("r"), findItem(t, m.Items, "View", "Reload").Accelerator)
	for _, it := range findItem(t, m.Items, "Edit").SubMenu.Items {
		require.Nil(t, it.Accelerator, "Edit item %q must leave its keys to the webview", it.Label)
	}

	for _, path := range [][]string{
		{"File", "Quit"}, {"View", "Reload"}, {"View", "Open in Browser"},
		{"Edit", "Undo"}, {"Edit", "Redo"}, {"Edit", "Cut"}, {"Edit", "Copy"}, {"Edit", "Paste"}, {"Edit", "Select All"},
	} {
		findItem(t, m.Items, path...).Click(&menu.CallbackData{})
	}
	require.Equal(t, []string{"quit", "reload", "browser",
		"edit:Undo", "edit:Redo", "edit:Cut", "edit:Copy", "edit:Paste", "edit:SelectAll"}, got)
}

func TestBuildMenuDarwinUsesSystemMenus(t *testing.T) {
	m := buildMenu("darwin", menuActions{quit: func() {}, reload: func() {}, openInBrowser: func() {}, edit: func(EditCommand) {}})
	require.Len(t, m.Items, 3)
	require.Equal(t, menu.AppMenuRole, m.Items[0].Role)
	require.Equal(t, menu.Role(menu.EditMenuRole), m.Items[1].Role)
	require.Equal(t, "View", m.Items[2].Label)
	require.False(t, findItemOK(m.Items, "File", "Quit"), "macOS quits from its App menu")
}
