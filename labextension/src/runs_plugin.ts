/**
 * The plugin that puts "Distributed runs" (`runs_panel.ts`) in JupyterLab's left sidebar, and the command that
 * shows it (`jupyter-torchdist:show-runs`). It needs the server extension
 * (`jupyter_torchdist/panel/server.py`, enabled by `pip install`); without it, the panel says so.
 *
 * Like the stop plugin (`plugin.ts`) it takes what it needs from the application object itself (its shell,
 * commands and server settings), so it depends on no JupyterLab token and loads in any shell with a left area.
 */
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { RunsClient, IServerSettingsLike } from './runs_api';
import { IRunsApp, RunsPanel } from './runs_panel';
import { openReport } from './runs_report';
import { OPEN_REPORT, RunsNotifier } from './runs_notify';

export interface IRunsAppLike extends IRunsApp {
  serviceManager?: { serverSettings?: IServerSettingsLike };
  commands: IRunsApp['commands'] & {
    addCommand(id: string, options: { label: string; caption?: string; execute: (args: any) => void }): unknown;
  };
}

export const SHOW_RUNS = 'jupyter-torchdist:show-runs';

const runsPlugin = {
  id: 'jupyter-torchdist:runs',
  description: 'The "Distributed runs" panel: every %%distribute run of your kernels, live, with stop and reports.',
  autoStart: true,
  optional: [ISettingRegistry],
  activate: (app: IRunsAppLike, registry: ISettingRegistry | null): void => {
    const settings = app.serviceManager?.serverSettings;
    if (!settings) {
      return; // not a front end that talks to a Jupyter server
    }
    const panel = new RunsPanel(app, new RunsClient(settings));
    try {
      app.shell.add(panel, 'left', { rank: 650 });
    } catch (reason) {
      console.warn('jupyter-torchdist: this front end has no left sidebar for the runs panel', reason);
      return;
    }
    app.commands.addCommand(SHOW_RUNS, {
      label: 'Show Distributed Runs',
      caption: 'Every %%distribute run of your kernels',
      execute: () => app.shell.activateById(panel.id)
    });
    const notifier = new RunsNotifier(app, new RunsClient(settings)); // its own client: its own ETag
    app.commands.addCommand(OPEN_REPORT, {
      label: "Open a Run's Report",
      execute: (args: { id?: string }) => {
        const entry = args && args.id ? notifier.latest.get(args.id) : undefined;
        if (entry) {
          openReport(app.shell, new RunsClient(settings), entry);
        }
      }
    });
    if (registry) {
      registry
        .load(runsPlugin.id)
        .then(loaded => {
          const apply = (): void => {
            notifier.enabled = loaded.composite.notifications !== false;
          };
          apply();
          loaded.changed.connect(apply);
        })
        .catch(reason => console.warn('jupyter-torchdist: the runs settings did not load', reason));
    }
    notifier.start();
  }
};

export default runsPlugin;
