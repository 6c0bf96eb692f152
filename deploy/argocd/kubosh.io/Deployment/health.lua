-- Argo CD health check for kubosh.io/Deployment (a BOSH deployment run by kubosh).
--
-- kubosh writes status.observedGeneration and three conditions (Ready, Reconciling,
-- Stalled), each stamped with the generation it was computed for. In order:
--   being deleted                           -> Progressing
--   status not yet of metadata.generation   -> Progressing
--   spec.paused                             -> Suspended
--   Stalled=True (kubosh gave up until the spec or an input changes) -> Degraded
--   Ready=True                              -> Healthy
--   otherwise (deploying, waiting for a release, retrying, ...) -> Progressing
--
-- Uses only Lua's base and table libraries: argocd-cm runs a custom check without the
-- standard libraries (no string.*) unless resource.customizations.useOpenLibs is set.

local hs = {}
local meta = obj.metadata or {}
local spec = obj.spec or {}
local status = obj.status or {}
local generation = meta.generation

-- The condition of this type, if it describes the current generation.
local function condition(kind)
  if type(status.conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      if c.observedGeneration ~= nil and generation ~= nil and c.observedGeneration ~= generation then
        return nil
      end
      return c
    end
  end
  return nil
end

local function isTrue(c)
  return c ~= nil and c.status == "True"
end

local function hasMessage(c)
  return c ~= nil and type(c.message) == "string" and c.message ~= ""
end

-- "<reason>: <message>", or whichever of the two there is.
local function said(c)
  if hasMessage(c) and type(c.reason) == "string" and c.reason ~= "" then
    return c.reason .. ": " .. c.message
  elseif hasMessage(c) then
    return c.message
  end
  return c.reason or ""
end

local function instances()
  if type(status.instances) ~= "string" or status.instances == "" then
    return nil
  end
  local text = status.instances .. " instances running"
  local failing = 0
  if type(status.instanceGroups) == "table" then
    for _, g in ipairs(status.instanceGroups) do
      if type(g.failing) == "number" then
        failing = failing + g.failing
      end
    end
  end
  if failing > 0 then
    text = text .. ", " .. tostring(failing) .. " failing"
  end
  return text
end

if meta.deletionTimestamp ~= nil then
  local deleting = condition("Reconciling")
  hs.status = "Progressing"
  if isTrue(deleting) and deleting.reason == "Deleting" and hasMessage(deleting) then
    hs.message = "Deletion in progress (" .. deleting.message .. ")"
  else
    hs.message = "Deletion in progress: waiting for the controller to delete the VMs"
  end
  return hs
end

if generation ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe generation " .. tostring(generation)
  if status.observedGeneration ~= nil then
    hs.message = hs.message .. " (the status is of generation " .. tostring(status.observedGeneration) .. ")"
  end
  return hs
end

local ready = condition("Ready")
local reconciling = condition("Reconciling")
local stalled = condition("Stalled")

if spec.paused == true then
  hs.status = "Suspended"
  hs.message = "Paused (spec.paused): nothing is created, updated or deleted until it is unset"
  if isTrue(stalled) then
    hs.message = hs.message .. "; also stalled: " .. said(stalled)
  elseif isTrue(reconciling) and reconciling.reason ~= "Paused" and hasMessage(reconciling) then
    hs.message = hs.message .. "; also " .. reconciling.message
  end
  return hs
end

if isTrue(stalled) then
  hs.status = "Degraded"
  hs.message = said(stalled)
  return hs
end

if isTrue(ready) then
  hs.status = "Healthy"
  local parts = {}
  local running = instances()
  if running ~= nil then
    table.insert(parts, running)
  end
  if hasMessage(ready) then
    table.insert(parts, ready.message)
  end
  hs.message = table.concat(parts, "; ")
  return hs
end

hs.status = "Progressing"
if isTrue(reconciling) and hasMessage(reconciling) then
  if reconciling.reason == "RetryingAfterError" then
    hs.message = "Deploy failed: " .. reconciling.message
  elseif reconciling.reason == "Interrupted" then
    hs.message = "Deploy interrupted: " .. reconciling.message
  else
    hs.message = reconciling.message
  end
else
  hs.message = "Waiting for the controller to report readiness"
end
return hs
