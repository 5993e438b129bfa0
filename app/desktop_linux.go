//go:build linux && ((desktop && production) || dev)

package app

/*
#cgo linux pkg-config: gtk+-3.0
#cgo !webkit2_41 pkg-config: webkit2gtk-4.0
#cgo webkit2_41 pkg-config: webkit2gtk-4.1

#include <stdlib.h>
#include <string.h>
#include <gtk/gtk.h>
#include <webkit2/webkit2.h>

static WebKitWebView *vigil_find_webview(GtkWidget *w) {
	if (WEBKIT_IS_WEB_VIEW(w)) {
		return WEBKIT_WEB_VIEW(w);
	}
	if (!GTK_IS_CONTAINER(w)) {
		return NULL;
	}
	WebKitWebView *found = NULL;
	GList *children = gtk_container_get_children(GTK_CONTAINER(w));
	for (GList *l = children; l != NULL && found == NULL; l = l->next) {
		found = vigil_find_webview(GTK_WIDGET(l->data));
	}
	g_list_free(children);
	return found;
}

static gboolean vigil_edit_idle(gpointer data) {
	char *cmd = data;
	GList *tops = gtk_window_list_toplevels();
	for (GList *l = tops; l != NULL; l = l->next) {
		WebKitWebView *wv = vigil_find_webview(GTK_WIDGET(l->data));
		if (wv != NULL) {
			webkit_web_view_execute_editing_command(wv, cmd);
			break;
		}
	}
	g_list_free(tops);
	free(cmd);
	return G_SOURCE_REMOVE;
}

static void vigil_edit(const char *cmd) {
	g_idle_add(vigil_edit_idle, strdup(cmd));
}

// A failed main-frame load of the console (the guardian stopped or restarts) goes back
// to the start page, which waits for the guardian and then returns to the same address,
// instead of leaving WebKit's error page behind.
static gboolean vigil_load_failed(WebKitWebView *wv, WebKitLoadEvent ev, gchar *uri, GError *err, gpointer start) {
	if (err != NULL && (err->domain == WEBKIT_POLICY_ERROR ||
	    g_error_matches(err, WEBKIT_NETWORK_ERROR, WEBKIT_NETWORK_ERROR_CANCELLED))) {
		return FALSE;
	}
	if (uri == NULL || !(g_str_has_prefix(uri, "http://") || g_str_has_prefix(uri, "https://"))) {
		return FALSE;
	}
	gchar *next = g_uri_escape_string(uri, NULL, FALSE);
	gchar *target = g_strconcat((const gchar *)start, "?next=", next, NULL);
	webkit_web_view_load_uri(wv, target);
	g_free(target);
	g_free(next);
	return TRUE;
}

static gboolean vigil_hook_idle(gpointer data) {
	GList *tops = gtk_window_list_toplevels();
	for (GList *l = tops; l != NULL; l = l->next) {
		WebKitWebView *wv = vigil_find_webview(GTK_WIDGET(l->data));
		if (wv == NULL) {
			continue;
		}
		// The start page is what the webview was first told to load.
		const gchar *uri = webkit_web_view_get_uri(wv);
		if (uri != NULL && !g_str_has_prefix(uri, "http://") && !g_str_has_prefix(uri, "https://")) {
			gchar *start = g_strdup(uri);
			gchar *q = strchr(start, '?');
			if (q != NULL) {
				*q = 0;
			}
			g_signal_connect_data(wv, "load-failed", G_CALLBACK(vigil_load_failed), start,
				(GClosureNotify)g_free, 0);
		}
		break;
	}
	g_list_free(tops);
	return G_SOURCE_REMOVE;
}

static void vigil_hook(void) {
	g_idle_add(vigil_hook_idle, NULL);
}

static gboolean vigil_quit_idle(gpointer data) {
	gtk_main_quit();
	return G_SOURCE_REMOVE;
}

static void vigil_quit(void) {
	g_idle_add(vigil_quit_idle, NULL);
}
*/
import "C"

import (
	"context"
	"unsafe"
)

// editWebview runs a WebKit editing command in the window's webview on the GTK thread,
// the same command the webview's own key bindings run, so paste works too (a script's
// document.execCommand("paste") is refused).
func editWebview(_ context.Context, cmd EditCommand) {
	s := C.CString(string(cmd))
	defer C.free(unsafe.Pointer(s))
	C.vigil_edit(s)
}

// hookWebview makes a failed load of the console return to the start page, which waits
// for the guardian; it runs on the GTK thread once the main loop turns.
func hookWebview() {
	C.vigil_hook()
}

// quitWindow ends the GTK main loop from the GTK thread. Wails' runtime.Quit calls
// gtk_main_quit on the caller's goroutine, which is lost when it comes before the loop
// has started (a shutdown signal during startup); an idle callback runs once it has.
func quitWindow(_ context.Context) {
	C.vigil_quit()
}
