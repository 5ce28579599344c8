# JupyterLab as the lab's learners get it: `make lab` starts `jupyter lab --config=lab/jupyter_lab_config.py`
# (tests/widgets/test_browser_lab.py starts it the same way). Everything goes through JupyterLab's own
# settings; nothing installed is patched.
import os

here = os.path.dirname(os.path.abspath(__file__))

# The notebooks' folder is the root of the file browser.
c.ServerApp.root_dir = os.path.join(os.path.dirname(here), "notebooks")
# Default settings for every learner (settings/overrides.json; a learner's own settings still win):
# no "Would you like to get notified about official Jupyter news?" prompt, no news fetched and
# no update check from the page.
c.LabApp.app_settings_dir = os.path.join(here, "settings")
# ... and none from the server either: it never asks pypi.org or jupyter.org.
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
c.LabApp.news_url = None
