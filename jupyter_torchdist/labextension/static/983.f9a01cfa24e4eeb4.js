"use strict";(self.rspackChunkjupyter_torchdist=self.rspackChunkjupyter_torchdist||[]).push([[983],{475(t,r,o){var e=o(601),a=o.n(e),i=o(314),s=(o.n(i))()(a());s.push([t.id,`/*
 * jupyter-torchdist run report. Theme-aware: JupyterLab CSS variables only,
 * with tints mixed from them so the dark theme works too.
 */

.jp-TorchDist {
  --td-ok: var(--jp-success-color1, #388e3c);
  --td-bad: var(--jp-error-color1, #d32f2f);
  --td-warn: var(--jp-warn-color1, #f57c00);
  --td-info: var(--jp-brand-color1, #1976d2);
  --td-idle: var(--jp-content-font-color3, #9e9e9e);
  --td-border: var(--jp-border-color2, #e0e0e0);
  --td-soft: var(--jp-layout-color2, #eeeeee);
  --td-fg: var(--jp-content-font-color1, var(--vscode-foreground, rgba(0, 0, 0, 0.87)));
  --td-muted: var(--jp-content-font-color2, var(--vscode-descriptionForeground, rgba(0, 0, 0, 0.54)));
  --td-bg: var(--jp-layout-color1, var(--vscode-editor-background, #fff));
  --td-mono: var(--jp-code-font-family, monospace);

  font-family: var(--jp-ui-font-family, system-ui, sans-serif);
  font-size: var(--jp-ui-font-size1, 13px);
  color: var(--td-fg);
  padding: 2px 0 4px;
  overflow: hidden;
}

.jp-TorchDist-report {
  display: flex;
  flex-direction: column;
  gap: 10px;
  max-width: 1100px;
}

/* Header ---------------------------------------------------------------- */
.jp-TorchDist-header {
  display: flex;
  flex-direction: column;
  gap: 6px;
}

.jp-TorchDist-headerTop {
  display: flex;
  align-items: center;
  gap: 10px;
  flex-wrap: wrap;
}

.jp-TorchDist-badge {
  display: inline-block;
  padding: 2px 9px;
  border-radius: 10px;
  font-size: var(--jp-ui-font-size0, 11px);
  font-weight: 600;
  letter-spacing: 0.03em;
  text-transform: uppercase;
  color: #fff;
  background: var(--td-idle);
}

.jp-TorchDist-status-succeeded { background: var(--td-ok); }
.jp-TorchDist-status-failed { background: var(--td-bad); }
.jp-TorchDist-status-timeout { background: var(--td-warn); }
.jp-TorchDist-status-interrupted { background: var(--td-warn); }
.jp-TorchDist-status-queued { background: var(--td-idle); }
.jp-TorchDist-status-running,
.jp-TorchDist-status-starting,
.jp-TorchDist-status-stopping { background: var(--td-info); }

.jp-TorchDist-title {
  font-family: var(--td-mono);
  font-weight: 600;
  font-size: var(--jp-code-font-size, 13px);
}

.jp-TorchDist-meta {
  color: var(--td-muted);
  margin-left: auto;
  font-variant-numeric: tabular-nums;
}

.jp-TorchDist-notice {
  padding: 2px 8px;
  border-left: 3px solid var(--td-warn);
  background: color-mix(in srgb, var(--td-warn) 8%, transparent);
  font-size: var(--jp-ui-font-size1, 13px);
}

.jp-TorchDist-headline {
  color: var(--td-fg);
}

.jp-TorchDist-chips {
  display: flex;
  flex-wrap: wrap;
  gap: 6px;
  align-items: center;
}

.jp-TorchDist-chip,
.jp-TorchDist-option {
  display: inline-flex;
  align-items: center;
  gap: 5px;
  padding: 1px 8px;
  border: 1px solid var(--td-border);
  border-radius: 10px;
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-muted);
  white-space: nowrap;
}

.jp-TorchDist-option {
  font-family: var(--td-mono);
  border-style: dashed;
}

.jp-TorchDist-dot {
  width: 7px;
  height: 7px;
  border-radius: 50%;
  background: var(--td-idle);
}

/* Rank states: dots, pills, log tabs ------------------------------------ */
.jp-TorchDist-dot.jp-TorchDist-state-done { background: var(--td-ok); }
.jp-TorchDist-dot.jp-TorchDist-state-failed { background: var(--td-bad); }
.jp-TorchDist-dot.jp-TorchDist-state-stopped { background: var(--td-warn); }
.jp-TorchDist-dot.jp-TorchDist-state-stopped_early { background: var(--td-idle); }
.jp-TorchDist-dot.jp-TorchDist-state-running,
.jp-TorchDist-dot.jp-TorchDist-state-starting { background: var(--td-info); }

.jp-TorchDist-pill {
  display: inline-block;
  min-width: 52px;
  padding: 0 7px;
  border-radius: 9px;
  text-align: center;
  font-size: var(--jp-ui-font-size0, 11px);
  line-height: 17px;
  font-weight: 600;
  color: var(--td-muted);
  background: color-mix(in srgb, var(--td-idle) 18%, transparent);
}

.jp-TorchDist-pill.jp-TorchDist-state-done {
  color: var(--td-ok);
  background: color-mix(in srgb, var(--td-ok) 14%, transparent);
}

.jp-TorchDist-pill.jp-TorchDist-state-failed {
  color: var(--td-bad);
  background: color-mix(in srgb, var(--td-bad) 14%, transparent);
}

.jp-TorchDist-pill.jp-TorchDist-state-stopped {
  color: var(--td-warn);
  background: color-mix(in srgb, var(--td-warn) 14%, transparent);
}

.jp-TorchDist-pill.jp-TorchDist-state-running,
.jp-TorchDist-pill.jp-TorchDist-state-starting {
  color: var(--td-info);
  background: color-mix(in srgb, var(--td-info) 14%, transparent);
}

/* A sweep member stopped early by the sweep's rule: muted (an expected outcome), outlined so it is not "queued" */
.jp-TorchDist-pill.jp-TorchDist-state-stopped_early {
  font-style: italic;
  box-shadow: inset 0 0 0 1px color-mix(in srgb, var(--td-idle) 70%, transparent);
}

/* Failure --------------------------------------------------------------- */
.jp-TorchDist-error {
  border: 1px solid color-mix(in srgb, var(--td-bad) 45%, transparent);
  border-left: 4px solid var(--td-bad);
  border-radius: 4px;
  background: color-mix(in srgb, var(--td-bad) 6%, transparent);
  padding: 8px 12px;
  display: flex;
  flex-direction: column;
  gap: 6px;
}

.jp-TorchDist-errorWhere {
  display: flex;
  align-items: center;
  gap: 4px;
  flex-wrap: wrap;
}

.jp-TorchDist-kind {
  margin-left: 6px;
  padding: 0 6px;
  border-radius: 3px;
  font-size: var(--jp-ui-font-size0, 11px);
  font-family: var(--td-mono);
  color: var(--td-bad);
  border: 1px solid color-mix(in srgb, var(--td-bad) 40%, transparent);
}

.jp-TorchDist-errorSummary {
  font-family: var(--td-mono);
  font-weight: 600;
  color: var(--td-bad);
  white-space: pre-wrap;
  word-break: break-word;
}

.jp-TorchDist pre {
  margin: 0;
  padding: 6px 8px;
  font-family: var(--td-mono);
  font-size: var(--jp-code-font-size, 12px);
  line-height: 1.4;
  border-radius: 3px;
  overflow: auto;
  white-space: pre;
  background: var(--jp-cell-editor-background, var(--td-soft));
  border: 1px solid var(--td-border);
}

.jp-TorchDist-traceback {
  max-height: 22em;
}

.jp-TorchDist-summary {
  cursor: pointer;
  color: var(--td-muted);
  user-select: none;
  padding: 2px 0;
}

.jp-TorchDist-summary:hover {
  color: var(--td-fg);
}

.jp-TorchDist-secondaryList {
  margin: 4px 0 0;
  padding-left: 18px;
  max-height: 12em;
  overflow: auto;
}

.jp-TorchDist-secondaryList li {
  margin: 2px 0;
}

.jp-TorchDist-secondaryRank {
  font-weight: 600;
  margin-right: 8px;
  white-space: nowrap;
}

.jp-TorchDist-secondarySummary {
  font-family: var(--td-mono);
  font-size: var(--jp-code-font-size, 12px);
  word-break: break-word;
}

/* Value and loss -------------------------------------------------------- */
.jp-TorchDist-panels {
  display: flex;
  flex-wrap: wrap;
  gap: 10px;
  align-items: flex-start;
}

.jp-TorchDist-panel {
  border: 1px solid var(--td-border);
  border-radius: 4px;
  padding: 6px 10px 8px;
  display: flex;
  flex-direction: column;
  gap: 5px;
  min-width: 0;
}

.jp-TorchDist-value {
  flex: 1 1 300px;
}

.jp-TorchDist-loss {
  flex: 0 1 460px;
}

.jp-TorchDist-panelTitle,
.jp-TorchDist-sectionTitle {
  font-size: var(--jp-ui-font-size0, 11px);
  font-weight: 600;
  letter-spacing: 0.04em;
  text-transform: uppercase;
  color: var(--td-muted);
}

.jp-TorchDist-valuePre {
  max-height: 12em;
  white-space: pre-wrap;
  word-break: break-word;
}

.jp-TorchDist-chart {
  width: 100%;
  max-width: 440px;
  height: auto;
  display: block;
}

.jp-TorchDist-chartGrid {
  stroke: var(--td-border);
  stroke-width: 1;
}

.jp-TorchDist-chartLabel {
  fill: var(--td-muted);
  font-size: 10px;
  font-family: var(--jp-ui-font-family, sans-serif);
}

.jp-TorchDist-legend {
  display: flex;
  flex-wrap: wrap;
  gap: 10px;
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-muted);
}

.jp-TorchDist-legendItem {
  display: inline-flex;
  align-items: center;
  gap: 4px;
}

.jp-TorchDist-swatch {
  width: 12px;
  height: 3px;
  border-radius: 2px;
}

/* Rank table ------------------------------------------------------------ */
.jp-TorchDist-tableWrap {
  max-height: 22em;
  overflow: auto;
  border: 1px solid var(--td-border);
  border-radius: 4px;
}

.jp-TorchDist-table {
  border-collapse: collapse;
  width: 100%;
  font-variant-numeric: tabular-nums;
}

.jp-TorchDist-table th {
  position: sticky;
  top: 0;
  z-index: 1;
  background: var(--td-bg);
  box-shadow: inset 0 -1px 0 var(--td-border);
  text-align: left;
  font-weight: 600;
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-muted);
  text-transform: uppercase;
  letter-spacing: 0.03em;
  padding: 5px 10px;
  white-space: nowrap;
}

.jp-TorchDist-table td {
  padding: 4px 10px;
  border-top: 1px solid var(--td-border);
  white-space: nowrap;
  vertical-align: middle;
}

.jp-TorchDist-table tbody tr:first-child td {
  border-top: none;
}

.jp-TorchDist-table tbody tr {
  cursor: pointer;
}

.jp-TorchDist-table tbody tr:hover {
  background: color-mix(in srgb, var(--td-info) 6%, transparent);
}

.jp-TorchDist-table th.jp-TorchDist-num,
.jp-TorchDist-table td.jp-TorchDist-num {
  text-align: right;
}

.jp-TorchDist-rankId {
  font-weight: 600;
}

.jp-TorchDist-table tr.jp-TorchDist-row-failed {
  background: color-mix(in srgb, var(--td-bad) 5%, transparent);
}

.jp-TorchDist-table tr.jp-TorchDist-root td:first-child {
  box-shadow: inset 3px 0 0 var(--td-bad);
}

.jp-TorchDist-host {
  font-family: var(--td-mono);
  font-size: var(--jp-code-font-size, 12px);
}

.jp-TorchDist-progress {
  min-width: 150px;
}

.jp-TorchDist-bar {
  display: inline-block;
  vertical-align: middle;
  width: 110px;
  height: 6px;
  border-radius: 3px;
  overflow: hidden;
  background: color-mix(in srgb, var(--td-idle) 25%, transparent);
  margin-right: 8px;
}

.jp-TorchDist-barFill {
  display: block;
  height: 100%;
  background: var(--td-info);
}

.jp-TorchDist-row-done .jp-TorchDist-barFill { background: var(--td-ok); }
.jp-TorchDist-row-failed .jp-TorchDist-barFill { background: var(--td-bad); }
.jp-TorchDist-row-stopped .jp-TorchDist-barFill { background: var(--td-warn); }

.jp-TorchDist-steps {
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-muted);
}

.jp-TorchDist-metrics {
  font-family: var(--td-mono);
  font-size: var(--jp-code-font-size, 12px);
}

.jp-TorchDist-metric + .jp-TorchDist-metric {
  margin-left: 10px;
}

.jp-TorchDist-metricKey {
  color: var(--td-muted);
}

/* Every column as narrow as its content; the last output takes the rest, cut with an ellipsis. */
.jp-TorchDist-table th,
.jp-TorchDist-table td {
  width: 1%;
}

.jp-TorchDist-table th:last-child,
.jp-TorchDist-table td.jp-TorchDist-last {
  width: auto;
  max-width: 0;
  min-width: 120px;
}

.jp-TorchDist-last {
  overflow: hidden;
  text-overflow: ellipsis;
  font-family: var(--td-mono);
  font-size: var(--jp-code-font-size, 12px);
  color: var(--td-muted);
}

.jp-TorchDist-last.jp-TorchDist-lastError {
  color: var(--td-bad);
}

/* Logs ------------------------------------------------------------------ */
.jp-TorchDist-logs > .jp-TorchDist-summary {
  margin-bottom: 4px;
}

.jp-TorchDist-tabs {
  display: flex;
  flex-wrap: wrap;
  gap: 3px;
  max-height: 5.6em;
  overflow: auto;
  margin-bottom: 6px;
}

.jp-TorchDist-tab {
  min-width: 30px;
  padding: 1px 6px;
  font-family: var(--td-mono);
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-fg);
  background: transparent;
  border: 1px solid var(--td-border);
  border-bottom: 2px solid var(--td-idle);
  border-radius: 3px;
  cursor: pointer;
}

.jp-TorchDist-tab:hover {
  background: var(--td-soft);
}

.jp-TorchDist-tab-done { border-bottom-color: var(--td-ok); }
.jp-TorchDist-tab-failed { border-bottom-color: var(--td-bad); }
.jp-TorchDist-tab-stopped { border-bottom-color: var(--td-warn); }
.jp-TorchDist-tab-running,
.jp-TorchDist-tab-starting { border-bottom-color: var(--td-info); }

.jp-TorchDist-tab.jp-TorchDist-tabOn {
  background: var(--td-info);
  border-color: var(--td-info);
  color: #fff;
}

.jp-TorchDist-logInfo {
  display: flex;
  flex-wrap: wrap;
  align-items: baseline;
  gap: 4px 12px;
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-muted);
  margin-bottom: 3px;
}

.jp-TorchDist-log {
  /* about twelve lines, then the pane scrolls; "show all" lifts the limit */
  max-height: calc(12 * 1.4em + 14px);
}

.jp-TorchDist-log.jp-TorchDist-logAll {
  max-height: none;
}

.jp-TorchDist-logDropped {
  color: var(--td-warn);
}

.jp-TorchDist-logWhere code {
  font-family: var(--td-mono);
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-fg);
}

.jp-TorchDist-link {
  padding: 0;
  border: none;
  background: none;
  color: var(--td-info);
  font: inherit;
  cursor: pointer;
}

.jp-TorchDist-link:hover {
  text-decoration: underline;
}

.jp-TorchDist-stderr {
  color: var(--td-bad);
}

.jp-TorchDist-muted {
  color: var(--td-muted);
}

/* Live view -------------------------------------------------------------- */
.jp-TorchDist-widget {
  padding: 4px 0 6px;
}

.jp-TorchDist-elapsed {
  font-variant-numeric: tabular-nums;
}

.jp-TorchDist-isLive .jp-TorchDist-status-running::before,
.jp-TorchDist-isLive .jp-TorchDist-status-starting::before {
  content: '';
  display: inline-block;
  width: 6px;
  height: 6px;
  margin: 0 6px 1px 0;
  border-radius: 50%;
  background: currentColor;
  animation: jp-TorchDist-pulse 1.6s ease-in-out infinite;
}

@keyframes jp-TorchDist-pulse {
  50% { opacity: 0.25; }
}

.jp-TorchDist-stop {
  display: inline-flex;
  align-items: center;
  gap: 6px;
  padding: 2px 10px;
  font: inherit;
  font-weight: 600;
  color: var(--td-bad);
  background: transparent;
  border: 1px solid color-mix(in srgb, var(--td-bad) 55%, transparent);
  border-radius: 4px;
  cursor: pointer;
}

.jp-TorchDist-stop:hover:not(:disabled) {
  color: #fff;
  background: var(--td-bad);
}

.jp-TorchDist-stop:disabled {
  color: var(--td-muted);
  border-color: var(--td-border);
  cursor: default;
}

.jp-TorchDist-stopIcon {
  width: 8px;
  height: 8px;
  border-radius: 1px;
  background: currentColor;
}

.jp-TorchDist-stopHint {
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-muted);
  border: 1px dashed var(--td-border);
  border-radius: 4px;
  padding: 1px 8px;
  cursor: help;
}

.jp-TorchDist-table tr.jp-TorchDist-picked td {
  background: color-mix(in srgb, var(--td-info) 7%, transparent);
}

.jp-TorchDist-barFill {
  transition: width 0.15s linear;
}

/* Where the time goes: usage columns and the data job's line (usage.ts) */
.jp-TorchDist-usage { white-space: nowrap; color: var(--td-muted); }
.jp-TorchDist-inputBound { color: var(--td-warn); font-weight: 600; }
.jp-TorchDist-data { margin-top: 2px; font-size: var(--jp-ui-font-size0, 11px); color: var(--td-muted); }

/* Where each rank is: the Stacks control, the stall notice, the stacks section (stacks.ts) */
.jp-TorchDist-stacksButton {
  padding: 2px 10px;
  font: inherit;
  font-weight: 600;
  color: var(--td-info);
  background: transparent;
  border: 1px solid color-mix(in srgb, var(--td-info) 55%, transparent);
  border-radius: 4px;
  cursor: pointer;
}
.jp-TorchDist-stacksButton:hover:not(:disabled) { color: #fff; background: var(--td-info); }
.jp-TorchDist-stacksButton:disabled { color: var(--td-muted); border-color: var(--td-border); cursor: help; }
.jp-TorchDist-stall {
  padding: 3px 8px;
  border-left: 3px solid var(--td-bad);
  background: color-mix(in srgb, var(--td-bad) 9%, transparent);
  font-weight: 600;
}
.jp-TorchDist-place { margin: 4px 0 8px; }
.jp-TorchDist-placeHead { display: flex; gap: 8px; align-items: baseline; }
.jp-TorchDist-placeRank { font-weight: 600; font-variant-numeric: tabular-nums; }
.jp-TorchDist-placeSummary { font-family: var(--jp-code-font-family, monospace); }
.jp-TorchDist-stack {
  margin: 2px 0 0;
  padding: 4px 8px;
  font-family: var(--jp-code-font-family, monospace);
  font-size: var(--jp-code-font-size, 12px);
  border: 1px solid var(--td-border);
  border-radius: 3px;
  overflow: auto;
  max-height: 16em;
}
.jp-TorchDist-frameLib { color: var(--td-muted); }
.jp-TorchDist-state-paused { color: var(--td-warn); border-color: var(--td-warn); }

/* A sweep's comparison view (compare.ts) -------------------------------- */
.jp-TorchDist-sortable {
  cursor: pointer;
  user-select: none;
  white-space: nowrap;
}

.jp-TorchDist-sortable:hover { text-decoration: underline; }

.jp-TorchDist-compareChart { max-width: 640px; }

.jp-TorchDist-sweepAbout {
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-muted);
}

.jp-TorchDist-row-best td { font-weight: 600; }
.jp-TorchDist-bestMark { color: #f58518; } /* the best point's colour in the effect charts (PALETTE[1]) */
.jp-TorchDist-row-stopped_early td { color: var(--td-muted); }

/* A sweep's parameter effect (effects.ts): a small scatter per parameter, then the best so far */
.jp-TorchDist-effectCharts {
  display: flex;
  flex-wrap: wrap;
  gap: 10px;
  align-items: flex-start;
}

.jp-TorchDist-effect { flex: 0 1 260px; min-width: 0; }
.jp-TorchDist-bestSoFar { flex: 0 1 440px; }
.jp-TorchDist-scatter { max-width: 260px; }

.jp-TorchDist-effectCaption {
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-muted);
}

.jp-TorchDist-legend {
  display: flex;
  flex-wrap: wrap;
  gap: 4px 12px;
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-muted);
}

.jp-TorchDist-swatch {
  display: inline-block;
  width: 10px;
  height: 3px;
  margin-right: 4px;
  vertical-align: middle;
}

.jp-TorchDist-sweepFailures { margin: 6px 0; }

.jp-TorchDist-sweepFailure {
  border-left: 3px solid var(--td-bad);
  padding: 2px 8px;
  margin: 2px 0;
  font-family: var(--td-mono);
  font-size: var(--jp-code-font-size, 12px);
  white-space: pre-wrap;
}

.jp-TorchDist-sweepFailure.jp-TorchDist-state-stopped { border-left-color: var(--td-warn); }

.jp-TorchDist-rowStop {
  margin-left: 6px;
  font-size: var(--jp-ui-font-size0, 11px);
  padding: 0 6px;
  cursor: pointer;
}

/* Many ranks: the overview, the loss band, the paged table and a rank's details (summary.ts, paged.ts) -- */
.jp-TorchDist-overview {
  display: flex;
  flex-direction: column;
  gap: 8px;
}

.jp-TorchDist-counts {
  display: flex;
  flex-direction: column;
  gap: 5px;
}

.jp-TorchDist-stateBar {
  display: flex;
  height: 6px;
  max-width: 640px;
  border-radius: 3px;
  overflow: hidden;
  background: var(--td-soft);
}

.jp-TorchDist-stateBar .jp-TorchDist-dot {
  height: 100%;
  border-radius: 0;
  min-width: 2px;
}

.jp-TorchDist-overviewRow {
  display: flex;
  flex-wrap: wrap;
  gap: 10px;
  align-items: flex-start;
}

.jp-TorchDist-quantiles { flex: 0 1 auto; }

.jp-TorchDist-sectionTitle {
  margin-bottom: 3px;
}

.jp-TorchDist-table.jp-TorchDist-qTable,
.jp-TorchDist-table.jp-TorchDist-hostTable {
  width: auto;
}

.jp-TorchDist-table.jp-TorchDist-pageTable th:last-child,
.jp-TorchDist-table.jp-TorchDist-pageTable td:last-child { width: 100%; text-align: left; }

.jp-TorchDist-table.jp-TorchDist-qTable th,
.jp-TorchDist-table.jp-TorchDist-qTable td,
.jp-TorchDist-table.jp-TorchDist-hostTable th,
.jp-TorchDist-table.jp-TorchDist-hostTable td,
.jp-TorchDist-table.jp-TorchDist-pageTable th,
.jp-TorchDist-table.jp-TorchDist-pageTable td {
  width: auto;
  max-width: none;
  min-width: 0;
  padding: 3px 10px;
}

.jp-TorchDist-qTable tbody tr,
.jp-TorchDist-hostTable tbody tr { cursor: default; }
.jp-TorchDist-hostTable tbody tr.jp-TorchDist-hostRow { cursor: pointer; }

.jp-TorchDist-qTable tbody th.jp-TorchDist-qName {
  position: static;
  box-shadow: none;
  border-top: 1px solid var(--td-border);
  font-family: var(--td-mono);
  text-transform: none;
  letter-spacing: 0;
  color: var(--td-fg);
  font-size: var(--jp-code-font-size, 12px);
}

.jp-TorchDist-hostWrap {
  max-height: 16em;
  overflow: auto;
  border: 1px solid var(--td-border);
  border-radius: 4px;
  display: inline-block;
  max-width: 100%;
}

.jp-TorchDist-hostStates { color: var(--td-muted); }
.jp-TorchDist-hostStates.jp-TorchDist-lastError { color: var(--td-bad); }

.jp-TorchDist-outliers,
.jp-TorchDist-places { min-width: 0; }

.jp-TorchDist-outlierList,
.jp-TorchDist-groupList {
  margin: 0;
  padding: 0;
  list-style: none;
  max-height: 16em;
  overflow: auto;
}

.jp-TorchDist-outlier {
  display: flex;
  align-items: baseline;
  gap: 8px;
  padding: 3px 6px;
  border-radius: 3px;
  cursor: pointer;
  white-space: nowrap;
}

.jp-TorchDist-outlier:hover,
.jp-TorchDist-outlier:focus-visible {
  background: color-mix(in srgb, var(--td-info) 8%, transparent);
  outline: none;
}

.jp-TorchDist-outlier.jp-TorchDist-picked {
  background: color-mix(in srgb, var(--td-info) 12%, transparent);
}

.jp-TorchDist-outlierRank {
  font-weight: 600;
  font-variant-numeric: tabular-nums;
  min-width: 5.5em;
}

.jp-TorchDist-outlierDetail {
  overflow: hidden;
  text-overflow: ellipsis;
  color: var(--td-muted);
  min-width: 0;
}

.jp-TorchDist-outlier .jp-TorchDist-pill { min-width: 0; }

.jp-TorchDist-groupList li { margin: 2px 0; }
.jp-TorchDist-groupCount { font-weight: 600; font-variant-numeric: tabular-nums; }

.jp-TorchDist-groupSummary {
  font-family: var(--td-mono);
  font-size: var(--jp-code-font-size, 12px);
  word-break: break-word;
}

.jp-TorchDist-rankLink { font-variant-numeric: tabular-nums; }

.jp-TorchDist-echoes { display: flex; flex-direction: column; gap: 2px; }
.jp-TorchDist-echoesTitle { color: var(--td-muted); }

.jp-TorchDist-swatch.jp-TorchDist-swatchMedian { background: #4c78a8; }

.jp-TorchDist-swatch.jp-TorchDist-swatchBand {
  height: 8px;
  background: color-mix(in srgb, #4c78a8 25%, transparent);
}

.jp-TorchDist-paged {
  display: flex;
  flex-direction: column;
  gap: 6px;
}

.jp-TorchDist-pager {
  display: flex;
  align-items: center;
  gap: 8px;
  flex-wrap: wrap;
}

.jp-TorchDist-search {
  font: inherit;
  color: var(--td-fg);
  background: var(--td-bg);
  border: 1px solid var(--td-border);
  border-radius: 3px;
  padding: 2px 6px;
  width: 16em;
}

.jp-TorchDist-search:focus {
  outline: 1px solid var(--td-info);
  border-color: var(--td-info);
}

.jp-TorchDist-pageInfo {
  color: var(--td-muted);
  font-variant-numeric: tabular-nums;
  margin-left: auto;
}

.jp-TorchDist-pageButton {
  font: inherit;
  font-size: var(--jp-ui-font-size0, 11px);
  color: var(--td-fg);
  background: transparent;
  border: 1px solid var(--td-border);
  border-radius: 3px;
  padding: 1px 8px;
  cursor: pointer;
}

.jp-TorchDist-pageButton:hover:not(:disabled) { border-color: var(--td-info); color: var(--td-info); }
.jp-TorchDist-pageButton:disabled { color: var(--td-muted); cursor: default; opacity: 0.6; }

.jp-TorchDist-pageTable td.jp-TorchDist-steps { font-size: inherit; color: inherit; }
.jp-TorchDist-pageTable tr.jp-TorchDist-featured td.jp-TorchDist-rankId { text-decoration: underline dotted; }

.jp-TorchDist-rankDetail {
  border: 1px solid var(--td-border);
  border-left: 3px solid var(--td-info);
  border-radius: 4px;
  padding: 6px 10px 8px;
  display: flex;
  flex-direction: column;
  gap: 6px;
}

.jp-TorchDist-rankDetailHead {
  display: flex;
  align-items: center;
  gap: 10px;
  flex-wrap: wrap;
  font-variant-numeric: tabular-nums;
}

.jp-TorchDist-rankDetailProgress { display: inline-flex; align-items: center; gap: 6px; }
.jp-TorchDist-closeRank { margin-left: auto; }
.jp-TorchDist-rankDetail .jp-TorchDist-loss { align-self: flex-start; flex: none; width: 460px; max-width: 100%; box-sizing: border-box; }
.jp-TorchDist-rankError { display: flex; flex-direction: column; gap: 4px; }
`,""]),o.d(r,{},{A:s})},278(t,r,o){var e=o(601),a=o.n(e),i=o(314),s=o.n(i),p=o(417),n=o.n(p),d=new URL(o(355),o.b),c=s()(a()),l=n()(d);c.push([t.id,`/*
 * The "Distributed runs" sidebar panel and its report tabs (src/runs_*.ts). Uses the report's variables
 * (base.css, .jp-TorchDist), so both themes work.
 */

/* The sidebar tab's icon: a bar chart drawn by a mask, in the tab's own text colour. */
.jp-TorchDist-runs-icon {
  background-color: var(--jp-inverse-layout-color3, #616161);
  -webkit-mask: url(${l}) center / 16px no-repeat;
  mask: url(${l}) center / 16px no-repeat;
  min-width: 16px;
  min-height: 16px;
}

.jp-TorchDist.jp-TorchDist-runs-panel {
  display: flex;
  flex-direction: column;
  background: var(--td-bg);
  overflow: auto;
  padding: 0;
  min-width: 240px;
}

.jp-TorchDist-runs-header {
  padding: 8px 12px 4px;
  font-size: var(--jp-ui-font-size0, 11px);
  font-weight: 600;
  letter-spacing: 0.04em;
  text-transform: uppercase;
  color: var(--td-muted);
}

.jp-TorchDist-runs-status:not(:empty) {
  margin: 4px 12px;
  color: var(--td-bad);
  font-size: var(--jp-ui-font-size0, 11px);
}

.jp-TorchDist-runs-empty {
  margin: 8px 12px;
  color: var(--td-muted);
}

.jp-TorchDist-runs-groupHead {
  display: flex;
  justify-content: space-between;
  gap: 8px;
  padding: 6px 12px 2px;
  border-top: 1px solid var(--td-border);
  font-weight: 600;
}

.jp-TorchDist-runs-groupCount {
  font-weight: normal;
  color: var(--td-muted);
  font-size: var(--jp-ui-font-size0, 11px);
}

.jp-TorchDist-runs-row {
  padding: 4px 12px 6px;
  display: flex;
  flex-direction: column;
  gap: 3px;
}

.jp-TorchDist-runs-row:hover {
  background: var(--td-soft);
}

.jp-TorchDist-runs-members {
  margin-left: 14px;
  border-left: 2px solid var(--td-border);
}

.jp-TorchDist-runs-head {
  display: flex;
  align-items: baseline;
  gap: 6px;
  min-width: 0;
}

.jp-TorchDist-runs-title {
  flex: 1;
  min-width: 0;
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
  font-family: var(--td-mono);
  font-size: var(--jp-code-font-size, 12px);
}

.jp-TorchDist-runs-id {
  color: var(--td-muted);
  font-size: var(--jp-ui-font-size0, 11px);
}

.jp-TorchDist-runs-detached {
  color: var(--td-muted);
  font-size: var(--jp-ui-font-size0, 11px);
  font-style: italic;
}

.jp-TorchDist-runs-state {
  font-size: var(--jp-ui-font-size0, 11px);
  font-weight: 600;
  text-transform: uppercase;
  color: var(--td-idle);
}

.jp-TorchDist-runs-state[data-state='running'],
.jp-TorchDist-runs-state[data-state='stopping'] {
  color: var(--td-info);
}

.jp-TorchDist-runs-state[data-state='done'] {
  color: var(--td-ok);
}

.jp-TorchDist-runs-state[data-state='failed'],
.jp-TorchDist-runs-state[data-state='lost'] {
  color: var(--td-bad);
}

.jp-TorchDist-runs-state[data-state='stopped'],
.jp-TorchDist-runs-state[data-state='stopped_early'] {
  color: var(--td-warn);
}

.jp-TorchDist-runs-bar {
  height: 4px;
  border-radius: 2px;
  background: var(--td-soft);
  overflow: hidden;
}

.jp-TorchDist-runs-barFill {
  height: 100%;
  background: var(--td-info);
  transition: width 0.4s ease-out;
}

.jp-TorchDist-runs-barFill[data-state='done'] {
  background: var(--td-ok);
}

.jp-TorchDist-runs-barFill[data-state='failed'],
.jp-TorchDist-runs-barFill[data-state='lost'] {
  background: var(--td-bad);
}

.jp-TorchDist-runs-barFill[data-state='stopped'],
.jp-TorchDist-runs-barFill[data-state='stopped_early'] {
  background: var(--td-warn);
}

.jp-TorchDist-runs-meta,
.jp-TorchDist-runs-outcome {
  color: var(--td-muted);
  font-size: var(--jp-ui-font-size0, 11px);
  overflow-wrap: anywhere;
}

.jp-TorchDist-runs-outcome {
  font-family: var(--td-mono);
}

.jp-TorchDist-runs-actions {
  display: flex;
  flex-wrap: wrap;
  align-items: center;
  gap: 4px;
}

.jp-TorchDist-runs-action,
.jp-TorchDist-runs-link {
  font-size: var(--jp-ui-font-size0, 11px);
  padding: 1px 6px;
  border: 1px solid var(--td-border);
  border-radius: 3px;
  background: transparent;
  color: var(--td-fg);
  text-decoration: none;
  cursor: pointer;
}

.jp-TorchDist-runs-action:disabled {
  opacity: 0.45;
  cursor: default;
}

span.jp-TorchDist-runs-link {
  cursor: help;
}

.jp-TorchDist-runs-action.jp-TorchDist-runs-stop:not(:disabled) {
  border-color: var(--td-bad);
  color: var(--td-bad);
}

.jp-TorchDist-runs-action.jp-TorchDist-runs-toggle {
  border: none;
  padding: 0 2px;
}

.jp-TorchDist.jp-TorchDist-runsReport {
  overflow: auto;
  padding: 8px 16px;
  background: var(--td-bg);
}
`,""]),o.d(r,{},{A:c})},314(t){t.exports=function(t){var r=[];return r.toString=function(){return this.map(function(r){var o="",e=void 0!==r[5];return r[4]&&(o+="@supports (".concat(r[4],") {")),r[2]&&(o+="@media ".concat(r[2]," {")),e&&(o+="@layer".concat(r[5].length>0?" ".concat(r[5]):""," {")),o+=t(r),e&&(o+="}"),r[2]&&(o+="}"),r[4]&&(o+="}"),o}).join("")},r.i=function(t,o,e,a,i){"string"==typeof t&&(t=[[null,t,void 0]]);var s={};if(e)for(var p=0;p<this.length;p++){var n=this[p][0];null!=n&&(s[n]=!0)}for(var d=0;d<t.length;d++){var c=[].concat(t[d]);e&&s[c[0]]||(void 0!==i&&(void 0===c[5]||(c[1]="@layer".concat(c[5].length>0?" ".concat(c[5]):""," {").concat(c[1],"}")),c[5]=i),o&&(c[2]&&(c[1]="@media ".concat(c[2]," {").concat(c[1],"}")),c[2]=o),a&&(c[4]?(c[1]="@supports (".concat(c[4],") {").concat(c[1],"}"),c[4]=a):c[4]="".concat(a)),r.push(c))}},r}},417(t){t.exports=function(t,r){return(r||(r={}),t&&(t=String(t.__esModule?t.default:t),/^['"].*['"]$/.test(t)&&(t=t.slice(1,-1)),r.hash&&(t+=r.hash),/["'() \t\n]|(%20)/.test(t)||r.needQuotes))?'"'.concat(t.replace(/"/g,'\\"').replace(/\n/g,"\\n"),'"'):t}},601(t){t.exports=function(t){return t[1]}},72(t){var r=[];function o(t){for(var o=-1,e=0;e<r.length;e++)if(r[e].identifier===t){o=e;break}return o}function e(t,e){for(var a={},i=[],s=0;s<t.length;s++){var p=t[s],n=e.base?p[0]+e.base:p[0],d=a[n]||0,c="".concat(n," ").concat(d);a[n]=d+1;var l=o(c),h={css:p[1],media:p[2],sourceMap:p[3],supports:p[4],layer:p[5]};if(-1!==l)r[l].references++,r[l].updater(h);else{var u=function(t,r){var o=r.domAPI(r);return o.update(t),function(r){r?(r.css!==t.css||r.media!==t.media||r.sourceMap!==t.sourceMap||r.supports!==t.supports||r.layer!==t.layer)&&o.update(t=r):o.remove()}}(h,e);e.byIndex=s,r.splice(s,0,{identifier:c,updater:u,references:1})}i.push(c)}return i}t.exports=function(t,a){var i=e(t=t||[],a=a||{});return function(t){t=t||[];for(var s=0;s<i.length;s++){var p=o(i[s]);r[p].references--}for(var n=e(t,a),d=0;d<i.length;d++){var c=o(i[d]);0===r[c].references&&(r[c].updater(),r.splice(c,1))}i=n}}},659(t){var r={};t.exports=function(t,o){var e=function(t){if(void 0===r[t]){var o=document.querySelector(t);if(window.HTMLIFrameElement&&o instanceof window.HTMLIFrameElement)try{o=o.contentDocument.head}catch(t){o=null}r[t]=o}return r[t]}(t);if(!e)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");e.appendChild(o)}},540(t){t.exports=function(t){var r=document.createElement("style");return t.setAttributes(r,t.attributes),t.insert(r,t.options),r}},56(t,r,o){t.exports=function(t){var r=o.nc;r&&t.setAttribute("nonce",r)}},825(t){t.exports=function(t){if("u"<typeof document)return{update:function(){},remove:function(){}};var r=t.insertStyleElement(t);return{update:function(o){var e,a,i;e="",o.supports&&(e+="@supports (".concat(o.supports,") {")),o.media&&(e+="@media ".concat(o.media," {")),(a=void 0!==o.layer)&&(e+="@layer".concat(o.layer.length>0?" ".concat(o.layer):""," {")),e+=o.css,a&&(e+="}"),o.media&&(e+="}"),o.supports&&(e+="}"),(i=o.sourceMap)&&"u">typeof btoa&&(e+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(i))))," */")),t.styleTagTransform(e,r,t.options)},remove:function(){var t;null===(t=r).parentNode||t.parentNode.removeChild(t)}}}},113(t){t.exports=function(t,r){if(r.styleSheet)r.styleSheet.cssText=t;else{for(;r.firstChild;)r.removeChild(r.firstChild);r.appendChild(document.createTextNode(t))}}},738(t,r,o){var e=o(72),a=o.n(e),i=o(825),s=o.n(i),p=o(659),n=o.n(p),d=o(56),c=o.n(d),l=o(540),h=o.n(l),u=o(113),f=o.n(u),x=o(475),b={};b.styleTagTransform=f(),b.setAttributes=c(),b.insert=n().bind(null,"head"),b.domAPI=s(),b.insertStyleElement=h(),a()(x.A,b),x.A&&x.A.locals&&x.A.locals;var j=o(278),g={};g.styleTagTransform=f(),g.setAttributes=c(),g.insert=n().bind(null,"head"),g.domAPI=s(),g.insertStyleElement=h(),a()(j.A,g),j.A&&j.A.locals&&j.A.locals},355(t){t.exports="data:image/svg+xml,%3Csvg xmlns=%27http://www.w3.org/2000/svg%27 viewBox=%270 0 16 16%27%3E%3Crect x=%271%27 y=%272%27 width=%2714%27 height=%272.5%27 rx=%271%27/%3E%3Crect x=%271%27 y=%276.75%27 width=%279%27 height=%272.5%27 rx=%271%27/%3E%3Crect x=%271%27 y=%2711.5%27 width=%2712%27 height=%272.5%27 rx=%271%27/%3E%3C/svg%3E"}}]);