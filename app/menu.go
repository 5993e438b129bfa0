package app

import (
	"github.com/wailsapp/wails/v2/pkg/menu"
	"github.com/wailsapp/wails/v2/pkg/menu/keys"
)

// EditCommand is a webview editing command, named as WebKit names them.
type EditCommand string

// The editing commands of the Edit menu.
const (
	EditUndo      EditCommand = "Undo"
	EditRedo      EditCommand = "Redo"
	EditCut       EditCommand = "Cut"
	EditCopy      EditCommand = "Copy"
	EditPaste     EditCommand = "Paste"
	EditSelectAll EditCommand = "SelectAll"
)

// menuActions are the callbacks the menu items trigger.
type menuActions struct {
	quit          func()
	reload        func()
	openInBrowser func()
	edit          func(EditCommand)
}

// buildMenu returns the window's menu bar for goos.
//
// macOS gets the system App and Edit menus (WKWebView only copies and pastes through
// them). Elsewhere the Edit items carry no accelerators on purpose: a GTK accelerator
// is matched before the webview sees the key, so binding Ctrl+C/Ctrl+Z there would take
// the keys away from the page (the rule editor has its own undo history); the webview
// already handles those keys itself, and the menu items serve the mouse.
func buildMenu(goos string, a menuActions) *menu.Menu {
	m := menu.NewMenu()
	if goos == "darwin" {
		m.Append(menu.AppMenu())
		m.Append(menu.EditMenu())
	} else {
		file := m.AddSubmenu("File")
		file.AddText("Quit", keys.CmdOrCtrl("q"), func(*menu.CallbackData) { a.quit() })

		edit := m.AddSubmenu("Edit")
		editItem := func(label string, cmd EditCommand) {
			edit.AddText(label, nil, func(*menu.CallbackData) { a.edit(cmd) })
		}
		editItem("Undo", EditUndo)
		editItem("Redo", EditRedo)
		edit.AddSeparator()
		editItem("Cut", EditCut)
		editItem("Copy", EditCopy)
		editItem("Paste", EditPaste)
		edit.AddSeparator()
		editItem("Select All", EditSelectAll)
	}

	view := m.AddSubmenu("View")
	view.AddText("Reload", keys.CmdOrCtrl("r"), func(*menu.CallbackData) { a.reload() })
	view.AddText("Open in Browser", keys.Combo("o", keys.CmdOrCtrlKey, keys.ShiftKey), func(*menu.CallbackData) { a.openInBrowser() })
	return m
}
