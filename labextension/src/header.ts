/**
 * The report's header: status badge, title, meta, the Stop control, headline, notices and chips.
 */
import { el, isObject, token } from './dom';
import { clip, clock, duration, num, str } from './format';
import { ILiveOptions, IN_FLIGHT, P, STATE_ORDER, STATUS_LABEL, StopState } from './model';
import { stacksControl } from './stacks';
import { IRankSnapshot, IRunSnapshot } from './types';
import { dataLine } from './usage';

function stopHint(stop: StopState, run: number | null): HTMLElement {
  const text =
    run !== null
      ? `To stop, run.stop() on its handle (jupyter_torchdist.runs() lists run ${run})`
      : stop === 'hint'
        ? 'To stop, interrupt the kernel'
        : 'Could not reach the kernel: use Kernel \u25b8 Interrupt';
  const hint = el('span', `${P}-stopHint`, text);
  hint.title =
    run !== null
      ? 'A background run goes on while other cells run: the kernel\u2019s interrupt does not stop it.'
      : stop === 'hint'
        ? 'This front end lacks the jupyter-torchdist extension: use its Interrupt button (\u25a0) ' +
          'to stop every rank.'
        : 'The notebook holding this view was not found.';
  return hint;
}

function stopControl(status: string, stop: StopState, run: number | null): HTMLElement | null {
  if (!IN_FLIGHT.includes(status)) {
    return null;
  }
  if (stop === 'hint' || stop === 'unreachable') {
    return stopHint(stop, run);
  }
  const stopping = stop === 'sent' || status === 'stopping';
  const button = el('button', `${P}-stop`);
  button.type = 'button';
  button.dataset.action = 'stop';
  button.disabled = stopping;
  button.title =
    run !== null
      ? `Stop run ${run} only (it runs in the background: the cells running now are not interrupted)`
      : 'Stop the run: interrupts this notebook\u2019s kernel, which stops every rank';
  button.appendChild(el('span', `${P}-stopIcon`));
  button.appendChild(document.createTextNode(stopping ? 'Stopping\u2026' : 'Stop'));
  return button;
}

function metaLine(snap: IRunSnapshot, ranks: IRankSnapshot[], live: ILiveOptions | null): HTMLElement {
  const status = str(snap.status) || 'unknown';
  const meta = el('span', `${P}-meta`);
  const parts: string[] = backgroundRun(snap) !== null ? [`run ${backgroundRun(snap)} in the background`] : [];
  if (str(snap.backend)) {
    parts.push(str(snap.backend));
  }
  const world = num(snap.world_size) ?? ranks.length;
  parts.push(`${world} rank${world === 1 ? '' : 's'}`);
  meta.appendChild(document.createTextNode(`${parts.join(' \u00b7 ')} \u00b7 `));
  const elapsed = num(snap.elapsed_s);
  const ticking = live !== null && IN_FLIGHT.includes(status) && elapsed !== null;
  const time = el(
    'span',
    `${P}-elapsed`,
    ticking ? clock((elapsed as number) + live.extra) : duration(elapsed)
  );
  time.title = 'elapsed';
  meta.appendChild(time);
  const id = str(snap.id);
  if (id) {
    const tag = el('span', `${P}-runId`, ` \u00b7 id ${id}`);
    tag.title = "the run's durable id: the runs panel and `jupyter-torchdist runs` list it, `jupyter-torchdist stop` takes it";
    meta.appendChild(tag);
  }
  return meta;
}

function topLine(snap: IRunSnapshot, ranks: IRankSnapshot[], live: ILiveOptions | null): HTMLElement {
  const status = str(snap.status) || 'unknown';
  const top = el('div', `${P}-headerTop`);
  top.appendChild(el('span', `${P}-badge ${P}-status-${token(status)}`, STATUS_LABEL[status] ?? status));
  top.appendChild(el('span', `${P}-title`, str(snap.title) || '%%distribute'));
  top.appendChild(metaLine(snap, ranks, live));
  const stacks = live ? stacksControl(status, live.stacks ?? live.stop) : null;
  if (stacks) {
    top.appendChild(stacks);
  }
  const stop = live ? stopControl(status, live.stop, backgroundRun(snap)) : null;
  if (stop) {
    top.appendChild(stop);
  }
  return top;
}

/** A background run's number (its Stop and Stacks reach that run only); null for a foreground run. */
export function backgroundRun(snap: IRunSnapshot): number | null {
  const id = num(snap.run_id);
  return snap.background === true && id !== null ? id : null;
}

function stateChips(ranks: IRankSnapshot[], chips: HTMLElement): void {
  const tally = new Map<string, number>();
  for (const r of ranks) {
    const s = str(r.state) || 'pending';
    tally.set(s, (tally.get(s) ?? 0) + 1);
  }
  const order = [...STATE_ORDER, ...[...tally.keys()].filter(k => !STATE_ORDER.includes(k))];
  for (const s of order) {
    const n = tally.get(s);
    if (n) {
      const chip = el('span', `${P}-chip`);
      chip.appendChild(el('span', `${P}-dot ${P}-state-${token(s)}`));
      chip.appendChild(document.createTextNode(`${n} ${s}`));
      chips.appendChild(chip);
    }
  }
}

function optionChips(options: unknown, chips: HTMLElement): void {
  for (const [key, value] of Object.entries(isObject(options) ? options : {})) {
    if (key === 'n' || key === 'background' || value === null || value === false || value === undefined) {
      continue;
    }
    const text = Array.isArray(value) ? value.join(' ') : str(value);
    const shown = value === true ? key : `${key}=${clip(text, 40)}`;
    chips.appendChild(el('span', `${P}-option`, shown));
  }
}

/** Status, title, where and how long, Stop, the headline, notices, and a chip per rank state and option. */
export function header(
  snap: IRunSnapshot,
  ranks: IRankSnapshot[],
  live: ILiveOptions | null
): HTMLElement {
  const head = el('div', `${P}-header`);
  head.dataset.k = 'header';
  head.appendChild(topLine(snap, ranks, live));
  if (str(snap.headline)) {
    head.appendChild(el('div', `${P}-headline`, str(snap.headline)));
  }
  if (str(snap.stall)) {
    head.appendChild(el('div', `${P}-stall`, str(snap.stall)));
  }
  const data = dataLine(snap.data);
  if (data) {
    head.appendChild(el('div', `${P}-data`, data));
  }
  const notices = Array.isArray(snap.notices) ? snap.notices : [];
  for (const notice of notices) {
    head.appendChild(el('div', `${P}-notice`, str(notice)));
  }
  const chips = el('div', `${P}-chips`);
  if (!isObject(snap.summary)) {
    stateChips(ranks, chips); // a many-rank run counts its ranks in its overview (`summary.ts`)
  }
  optionChips(snap.options, chips);
  head.appendChild(chips);
  return head;
}
