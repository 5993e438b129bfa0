import { defineConfig } from 'vitest/config';
import { svelte } from '@sveltejs/vite-plugin-svelte';

// `npm run dev` proxies the API and the live websocket to a running `vigil serve`.
// The guardian checks the Origin of websocket and mutating requests, so the proxy presents
// the guardian's own origin and host instead of the dev server's.
const target = process.env.VIGIL_URL ?? 'http://127.0.0.1:7878';

function sameOrigin(proxy: { on(ev: string, fn: (req: { setHeader(k: string, v: string): void }) => void): void }) {
  const fix = (req: { setHeader(k: string, v: string): void }) => req.setHeader('origin', target);
  proxy.on('proxyReq', fix);
  proxy.on('proxyReqWs', fix);
}

export default defineConfig({
  plugins: [svelte()],
  // Relative asset URLs: the same build is served by `vigil serve` and by the desktop window.
  base: './',
  build: {
    // The built console is committed in ui/dist and embedded by the ui package, so a plain
    // `go install` serves it without Node. The build is reproducible (same sources, same
    // bytes), which is what lets `make ui-check` compare the committed copy with a fresh one.
    outDir: '../ui/dist',
    emptyOutDir: true,
    target: 'es2022',
    reportCompressedSize: true,
    modulePreload: { polyfill: false },
  },
  server: {
    proxy: {
      '/api': { target, ws: true, changeOrigin: true, configure: sameOrigin },
      '/aos': { target, changeOrigin: true, configure: sameOrigin },
    },
  },
  test: {
    include: ['src/**/*.test.ts'],
    environment: 'node',
    // The contrast test reads the theme's colours from app.css (?raw).
    css: { include: [/app\.css/] },
  },
});
