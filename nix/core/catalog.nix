# Catalog components: always on, hosted on the `gateway` node. Each one with a
# web UI is an instance of the deployment (section null).
{ pkgs }:
[
  {
    name = "dashboard";
    title = "Dashboard";
    subdomain = "dashboard";
    webUi = true;
    alwaysOn = true;
    packages = [ pkgs.slipway-dashboard ];
  }
]
